#include "launcher/membership_log.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/private_folder.h"

namespace een {

namespace {
std::string PathIn(const std::string& dir) { return dir + "/membership-history"; }
}  // namespace

Status WriteMembershipLog(const std::string& dir, const std::vector<MembershipChange>& history) {
  const std::string path = PathIn(dir), temporary = path + ".tmp";
  std::error_code ec;
  MakePrivateFolder(dir, ec);  // the PS make it too; whoever is first
  {
    std::ofstream out(temporary, std::ios::trunc);
    for (const MembershipChange& e : history) {
      out << e.epoch << ' ' << e.step << ' ';
      for (size_t i = 0; i < e.live.size(); ++i) out << (i ? "," : "") << e.live[i];
      out << '\n';
    }
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
    history.push_back(std::move(e));
  }
  return history;
}

Status WriteDataBatch(const std::string& dir, uint64_t batch) {
  const std::string path = dir + "/data-batch", temporary = path + ".tmp";
  std::error_code ec;
  MakePrivateFolder(dir, ec);
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << batch << '\n';
    out.flush();
    if (!out) return Unavailable("cannot write " + temporary + " (disk full?)");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return Unavailable("cannot rename " + temporary + " to " + path);
  }
  return Status::Ok();
}

Result<uint64_t> ReadDataBatch(const std::string& dir) {
  std::ifstream in(dir + "/data-batch");
  if (!in) return NotFound("no data-batch in " + dir);
  uint64_t batch = 0;
  if (!(in >> batch) || batch == 0) return DataLoss(dir + "/data-batch is not a batch size");
  return batch;
}

}  // namespace een
