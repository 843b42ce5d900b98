# Layering: the build stops when a file includes a header its folder may
# not use. The roles (ps/, worker/, launcher/) meet only through schema/,
# common/ and the public types of include/een/; none includes another
# role's headers, a transport backend's headers (common/transport/<backend>/:
# they are reached through common/transport/registry.h) or the LibTorch API
# (een/data_parallel.h, the worker's). bench/ and tests/ may use anything.
#
# een_check_layering() runs at configure time over the files git would
# build; a violation is a FATAL_ERROR naming the file, the include and the
# rule.

# Include prefixes each folder may use ("SELF" = its own folder).
set(_een_allowed_include "een/")
set(_een_allowed_common_transport_backend "common/status.h;common/logging.h;common/transport/")
set(_een_allowed_common_transport "common/status.h;common/logging.h;common/private_file.h;common/transport/")
set(_een_allowed_common "common/;schema/;een/optimizer.h;een/error.h;een/sampler.h;een/membership.h")
set(_een_allowed_ps "ps/;common/;schema/;een/optimizer.h;een/error.h;een/sampler.h;een/membership.h")
set(_een_allowed_launcher "launcher/;common/;schema/;een/optimizer.h;een/error.h;een/sampler.h;een/membership.h;een/redo_log.h")
set(_een_allowed_worker "worker/;common/;schema/;een/")
set(_een_allowed_samples "samples/;een/")
set(_een_backends "zmq;shm;mem;rdma")

function(_een_layer_of file out)
  if(file MATCHES "^common/transport/([a-z]+)/")
    set(${out} common_transport_backend PARENT_SCOPE)
  elseif(file MATCHES "^common/transport/")
    set(${out} common_transport PARENT_SCOPE)
  elseif(file MATCHES "^(include|common|ps|launcher|worker|samples)/")
    set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

function(een_check_layering root)
  file(GLOB_RECURSE sources RELATIVE ${root}
    ${root}/include/*.h ${root}/common/*.h ${root}/common/*.cc ${root}/ps/*.h ${root}/ps/*.cc
    ${root}/launcher/*.h ${root}/launcher/*.cc ${root}/worker/*.h ${root}/worker/*.cc
    ${root}/samples/*.h ${root}/samples/*.cc)
  set(violations "")
  foreach(file IN LISTS sources)
    _een_layer_of(${file} layer)
    if(layer STREQUAL "")
      continue()
    endif()
    set(allowed ${_een_allowed_${layer}})
    file(STRINGS ${root}/${file} lines REGEX "^#include [\"<](een|common|schema|ps|worker|launcher|samples|bench|tests)/")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^#include [\"<]([^\">]+)[\">].*" "\\1" inc "${line}")
      set(ok FALSE)
      foreach(prefix IN LISTS allowed)
        string(FIND "${inc}" "${prefix}" at)
        if(at EQUAL 0)
          set(ok TRUE)
        endif()
      endforeach()
      # A backend's folder is private to the transport (the registry and
      # the backends themselves).
      if(ok AND inc MATCHES "^common/transport/([a-z]+)/" AND NOT layer MATCHES "^common_transport")
        set(ok FALSE)
      endif()
      if(ok AND layer STREQUAL "common_transport" AND inc MATCHES "^common/transport/[a-z]+/"
         AND NOT file STREQUAL "common/transport/registry.cc")
        set(ok FALSE)
      endif()
      if(NOT ok)
        string(REPLACE ";" ", " rule "${allowed}")
        list(APPEND violations "  ${file}: #include \"${inc}\" (this folder may include ${rule}, and a transport backend only through common/transport/registry.h)")
      endif()
    endforeach()
  endforeach()
  if(violations)
    list(JOIN violations "\n" text)
    message(FATAL_ERROR "EEN layering: these includes cross a boundary (cmake/Layering.cmake):\n${text}")
  endif()
endfunction()

# Script mode, for the layering_check test (a file edited since the last
# configure): cmake -DEEN_LAYERING_ROOT=SOURCE_DIR -P cmake/Layering.cmake
if(CMAKE_SCRIPT_MODE_FILE AND DEFINED EEN_LAYERING_ROOT)
  een_check_layering(${EEN_LAYERING_ROOT})
  message(STATUS "EEN layering: every include keeps to its folder's rule")
endif()
