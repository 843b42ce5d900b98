# Installing EEN: `cmake --install build --prefix P` puts
#   bin/            een-launch, een-ps, een-coordinator, een-c10d-store, eenctl, een-export,
#                   een-bench(-worker)
#   lib/            libeen_worker.so
#   include/een/    the public headers
#   lib/cmake/EEN/  EENConfig.cmake: find_package(EEN) gives EEN::worker,
#                   which brings Torch's include folders, flags and links
#   lib/pkgconfig/  een.pc (pkg-config --cflags --libs een)
#   lib/python3/dist-packages/een   the Python module (when built)
#   share/een/samples               the samples' sources, buildable on their own
#   share/een/traces, models        what `een-bench replay` replays
#   share/een/bench                 its gloo reference (gloo_allreduce.py)
# and `cpack -G DEB` (in the build folder) packs the same for /usr as
# een_VERSION_ARCH.deb. Included last by the top-level CMakeLists.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EEN_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/EEN)

install(TARGETS een-launch een-ps een-coordinator eenctl een-bench een-bench-worker
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET een-c10d-store)  # not in sanitizer builds
  install(TARGETS een-c10d-store een-export RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(TARGETS een_worker een_public_headers EXPORT EENTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/een DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT EENTargets NAMESPACE EEN:: DESTINATION ${EEN_CMAKE_INSTALL_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/EENConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/EENConfig.cmake
                              INSTALL_DESTINATION ${EEN_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/EENConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/EENConfig.cmake ${PROJECT_BINARY_DIR}/EENConfigVersion.cmake
        DESTINATION ${EEN_CMAKE_INSTALL_DIR})

# een.pc: relative to its own folder (${pcfiledir}), so any prefix works.
# Torch has no .pc of its own: its include folders, flags and libraries are
# written out here.
# The compiler's own folders (/usr/include, the multiarch lib folder) are
# left out: naming them breaks #include_next and adds nothing.
file(RELATIVE_PATH EEN_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" EEN_PC_TO_PREFIX "${EEN_PC_TO_PREFIX}")
set(EEN_PC_TORCH_CFLAGS "${TORCH_CXX_FLAGS}")
foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
  if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    string(APPEND EEN_PC_TORCH_CFLAGS " -I${dir}")
  endif()
endforeach()
get_filename_component(EEN_TORCH_LIBDIR "${TORCH_LIBRARY}" DIRECTORY)
set(EEN_PC_TORCH_LIBS "-ltorch -ltorch_cpu -lc10")
if(NOT EEN_TORCH_LIBDIR IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
  set(EEN_PC_TORCH_LIBS "-L${EEN_TORCH_LIBDIR} -Wl,-rpath,${EEN_TORCH_LIBDIR} ${EEN_PC_TORCH_LIBS}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/een.pc.in ${PROJECT_BINARY_DIR}/een.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/een.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/samples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/een/samples
        PATTERN "traces" EXCLUDE PATTERN "models" EXCLUDE)
# What `een-bench replay` reads: the real models' traces, and the gloo reference.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/samples/traces ${PROJECT_SOURCE_DIR}/samples/models
        DESTINATION ${CMAKE_INSTALL_DATADIR}/een)
install(FILES ${PROJECT_SOURCE_DIR}/bench/gloo_allreduce.py DESTINATION ${CMAKE_INSTALL_DATADIR}/een/bench)

set(CPACK_PACKAGE_NAME een)
set(CPACK_PACKAGE_VENDOR "EEN")
set(CPACK_PACKAGE_CONTACT "EEN developers <een@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "data-parallel deep-learning training with a sharded parameter server")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A user builds against the headers of LibTorch (and runs Python programs
# with Debian's torch); gnuplot draws `eenctl debug --plot`; the samples
# need CLI11, zlib and the dataset.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libtorch-dev (>= ${Torch_VERSION_MAJOR}.${Torch_VERSION_MINOR})")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-torch, cmake, pkg-config, g++")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "gnuplot-nox, libcli11-dev, zlib1g-dev, dataset-fashion-mnist")
set(CPACK_GENERATOR DEB)
include(CPack)
