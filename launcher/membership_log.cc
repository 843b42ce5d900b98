#include "launcher/membership_log.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/private_folder.h"

namespace een {

namespace {
std::string PathIn(const std::string& dir) { return dir + "/membership-history"; }

// Writes `text` to a temporary file in `dir` (made private if new), readable
// by the owner only, and renames it over `path`: a crash leaves the old file
// or the new one, never a torn one.
Status WriteWhole(const std::string& dir, const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  std::error_code ec;
  MakePrivateFolder(dir, ec);  // the PS make it too; whoever is first
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return Unavailable("cannot write " + temporary + " (disk full?)");
  }
  std::filesystem::permissions(
      temporary, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
      std::filesystem::perm_options::replace, ec);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return Unavailable("cannot rename " + temporary + " to " + path);
  }
  return Status::Ok();
}

}  // namespace

Status WriteMembershipLog(const std::string& dir, const std::vector<MembershipChange>& history) {
  std::ostringstream text;
  for (const MembershipChange& e : history) {
    text << e.epoch << ' ' << e.step << ' ';
    for (size_t i = 0; i < e.live.size(); ++i) text << (i ? "," : "") << e.live[i];
    // The lost workers' unfinished steps, when there are any: W@FROM,...
    for (size_t i = 0; i < e.unfinished.size(); ++i) {
      text << (i ? "," : " ") << e.unfinished[i].worker << '@' << e.unfinished[i].from_step;
    }
    // The data follow later (data drawn ahead): data=STEP.
    if (e.data_step > e.step) text << " data=" << e.data_step;
    text << '\n';
  }
  return WriteWhole(dir, PathIn(dir), text.str());
}

Result<std::vector<MembershipChange>> ReadMembershipLog(const std::string& dir) {
  std::ifstream in(PathIn(dir));
  if (!in) return NotFound("no membership history in " + dir);
  std::vector<MembershipChange> history;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream fields(line);
    MembershipChange e;
    std::string ranks;
    if (!(fields >> e.epoch >> e.step >> ranks)) {
      return DataLoss(PathIn(dir) + " line " + std::to_string(n) + " is not 'EPOCH STEP RANKS'");
    }
    std::istringstream list(ranks);
    for (std::string r; std::getline(list, r, ',');) {
      try {
        e.live.push_back(std::stoi(r));
      } catch (const std::exception&) {
        return DataLoss(PathIn(dir) + " line " + std::to_string(n) + ": bad rank '" + r + "'");
      }
    }
    std::string owed;
    if ((fields >> owed) && owed.rfind("data=", 0) != 0) {
      std::istringstream items(owed);
      for (std::string item; std::getline(items, item, ',');) {
        UnfinishedSteps u;
        char at = 0;
        std::istringstream one(item);
        if (!(one >> u.worker >> at >> u.from_step) || at != '@' || u.worker < 0) {
          return DataLoss(PathIn(dir) + " line " + std::to_string(n) + ": bad unfinished steps '" +
                          item + "' (WORKER@STEP, before the change's step)");
        }
        e.unfinished.push_back(u);
      }
      if (!(fields >> owed)) owed.clear();
    }
    if (owed.rfind("data=", 0) == 0) {
      std::istringstream data(owed.substr(5));
      if (!(data >> e.data_step) || !data.eof() || e.data_step <= e.step ||
          e.data_step - e.step > kMaxDataLookAhead) {
        return DataLoss(PathIn(dir) + " line " + std::to_string(n) + ": bad data step '" + owed +
                        "' (data=STEP, after the change's step and at most " +
                        std::to_string(kMaxDataLookAhead) + " steps later)");
      }
    }
    for (const UnfinishedSteps& u : e.unfinished) {
      if (u.from_step >= e.layout_step()) {
        return DataLoss(PathIn(dir) + " line " + std::to_string(n) + ": unfinished steps from " +
                        std::to_string(u.from_step) + " are not before the change's (data) step");
      }
    }
    history.push_back(std::move(e));
  }
  return history;
}

Status WriteDataBatch(const std::string& dir, uint64_t batch) {
  return WriteWhole(dir, dir + "/data-batch", std::to_string(batch) + "\n");
}

Result<uint64_t> ReadDataBatch(const std::string& dir) {
  std::ifstream in(dir + "/data-batch");
  if (!in) return NotFound("no data-batch in " + dir);
  uint64_t batch = 0;
  if (!(in >> batch) || batch == 0) return DataLoss(dir + "/data-batch is not a batch size");
  return batch;
}

Status WriteModelLayout(const std::string& dir, const ModelLayout& layout) {
  return WriteWhole(dir, dir + "/" + kModelLayoutFile, EncodeModelLayout(layout));
}

}  // namespace een
