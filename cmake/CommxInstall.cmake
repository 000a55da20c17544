# SPDX-License-Identifier: MIT
# What `cmake --install` puts in place, and the Debian package CPack makes of it:
#   include/commx/...                        the headers
#   lib/cmake/commx/commxConfig.cmake        find_package(commx COMPONENTS ...), with
#     commx-targets.cmake                    commx::commx, commx::inproc, commx::shm
#     commx-<stack>-targets.cmake            commx::tcp (and shm_tcp), commx::wan (and
#                                            shm_tcp_wan), commx::mpi, one file each,
#                                            read only when that component is asked for
#     commx-mpi_wan-targets.cmake            commx::mpi_wan, read when mpi and wan are
#     commx-pmix-targets.cmake               commx::pmix (endpoints through PMIx)
#     commx-simgrid-targets.cmake            commx::simgrid (a simulated cluster)
#   share/commx/simgrid/*.xml                the simulated stack's platforms
#     CommxVariants.cmake                    commx_add_variants()
#   lib/pkgconfig/commx.pc, commx-<stack>.pc for builds without CMake
#   bin/commxrun, bin/commx-relay            (tools/*/CMakeLists.txt)
include(CMakePackageConfigHelpers)
set(COMMX_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/commx)
install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(TARGETS commx commx_inproc commx_shm EXPORT commx-targets)
install(EXPORT commx-targets NAMESPACE commx:: DESTINATION ${COMMX_CMAKE_DIR})
set(COMMX_CONFIG_STACKS "")
foreach(stack IN ITEMS tcp wan mpi pmix simgrid ucx)
  if(TARGET commx_${stack})
    # The layered stacks come with the network stack they run over.
    set(layered "")
    if(stack STREQUAL "tcp")
      set(layered commx_shm_tcp)
    elseif(stack STREQUAL "wan")
      set(layered commx_shm_tcp_wan)
    elseif(stack STREQUAL "ucx")
      set(layered commx_shm_ucx)
    endif()
    install(TARGETS commx_${stack} ${layered} EXPORT commx-${stack}-targets)
    install(EXPORT commx-${stack}-targets NAMESPACE commx:: DESTINATION ${COMMX_CMAKE_DIR})
    list(TRANSFORM layered REPLACE "^commx_" "")
    list(APPEND COMMX_CONFIG_STACKS ${stack} ${layered})
  endif()
endforeach()
if(TARGET commx_simgrid)
  install(DIRECTORY platforms/simgrid/ DESTINATION ${CMAKE_INSTALL_DATADIR}/commx/simgrid
          FILES_MATCHING PATTERN "*.xml")
endif()
# mpi+wan needs both: its own file, read when both components are loaded.
if(TARGET commx_mpi_wan)
  install(TARGETS commx_mpi_wan EXPORT commx-mpi_wan-targets)
  install(EXPORT commx-mpi_wan-targets NAMESPACE commx:: DESTINATION ${COMMX_CMAKE_DIR})
  list(APPEND COMMX_CONFIG_STACKS mpi_wan)
endif()
list(JOIN COMMX_CONFIG_STACKS " " COMMX_CONFIG_STACKS)

# Which MPI commx::mpi was built with: its pkg-config module, and the config's messages.
set(COMMX_CONFIG_MPI_FLAVOUR "")
set(commx_pc_mpi "")
if(TARGET commx_mpi)
  # FindMPI's cache: the header directory names the implementation on Debian and most systems.
  if(MPI_CXX_HEADER_DIR MATCHES "openmpi")
    set(COMMX_CONFIG_MPI_FLAVOUR "Open MPI")
    set(commx_pc_mpi ompi-c)
  elseif(MPI_CXX_HEADER_DIR MATCHES "mpich")
    set(COMMX_CONFIG_MPI_FLAVOUR "MPICH")
    set(commx_pc_mpi mpich)
  else()
    set(COMMX_CONFIG_MPI_FLAVOUR "an MPI")
    set(commx_pc_mpi mpi-c)  # Debian's default MPI, chosen by update-alternatives
  endif()
endif()

configure_package_config_file(cmake/commxConfig.cmake.in
  ${PROJECT_BINARY_DIR}/commxConfig.cmake INSTALL_DESTINATION ${COMMX_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/commxConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/commxConfig.cmake
              ${PROJECT_BINARY_DIR}/commxConfigVersion.cmake
              cmake/CommxVariants.cmake
        DESTINATION ${COMMX_CMAKE_DIR})

# --- pkg-config: one module per stack, for the flags differ (Asio's macros, libcrypto, MPI) ---
set(COMMX_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH COMMX_PC_PREFIX_FROM_PCDIR /prefix/${COMMX_PC_DIR} /prefix)  # "../.."
string(REGEX REPLACE "/$" "" COMMX_PC_PREFIX_FROM_PCDIR "${COMMX_PC_PREFIX_FROM_PCDIR}")
set(commx_pc_out ${PROJECT_BINARY_DIR}/pkgconfig)
configure_file(cmake/pkgconfig/commx.pc.in ${commx_pc_out}/commx.pc @ONLY)
set(commx_pc_files ${commx_pc_out}/commx.pc)
set(commx_librt "")
if(COMMX_LIBRT)
  set(commx_librt " -lrt")
endif()
foreach(stack IN ITEMS inproc shm tcp wan mpi shm_tcp shm_tcp_wan mpi_wan pmix simgrid ucx shm_ucx)
  if(NOT TARGET commx_${stack})
    continue()
  endif()
  set(COMMX_PC_STACK ${stack})
  set(COMMX_PC_NOTE "")
  set(COMMX_PC_REQUIRES commx)
  set(COMMX_PC_CFLAGS "")
  set(COMMX_PC_LIBS -pthread)
  if(stack STREQUAL "shm")
    string(APPEND COMMX_PC_LIBS "${commx_librt}")
  elseif(stack STREQUAL "tcp")
    set(COMMX_PC_NOTE "# Standalone Asio's asio.hpp (Debian: libasio-dev) is on the compiler's own path.")
    set(COMMX_PC_REQUIRES "commx, libssl, libcrypto")
    set(COMMX_PC_CFLAGS "-DASIO_STANDALONE -DASIO_NO_DEPRECATED")
  elseif(stack STREQUAL "wan")
    set(COMMX_PC_REQUIRES commx-tcp)
  elseif(stack STREQUAL "pmix")
    set(COMMX_PC_NOTE "# Beside a network stack's module: its endpoints through the launcher's PMIx.")
    set(COMMX_PC_REQUIRES "commx-tcp, pmix")
    set(COMMX_PC_CFLAGS "-DCOMMX_WITH_PMIX=1")
    set(COMMX_PC_LIBS "")
  elseif(stack STREQUAL "ucx")
    set(COMMX_PC_NOTE "# UCX's own variables (UCX_TLS, UCX_NET_DEVICES) choose what it uses.")
    set(COMMX_PC_REQUIRES "commx-tcp, ucx")
    set(COMMX_PC_LIBS "")
  elseif(stack STREQUAL "simgrid")
    set(COMMX_PC_NOTE "# Platforms: a file, or COMMX_SIMGRID_PLATFORM_DIR=${CMAKE_INSTALL_FULL_DATADIR}/commx/simgrid for the shipped ones by name.")
    set(COMMX_PC_REQUIRES "commx, simgrid")
    set(COMMX_PC_LIBS "")
  elseif(stack STREQUAL "mpi")
    set(COMMX_PC_NOTE "# Built with ${COMMX_CONFIG_MPI_FLAVOUR}; compiling with its mpicxx works too.")
    set(COMMX_PC_REQUIRES "commx, ${commx_pc_mpi}")
    set(COMMX_PC_CFLAGS "-DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1")
    set(COMMX_PC_LIBS "")
  elseif(stack MATCHES "^(shm|mpi)_(tcp|wan|tcp_wan|ucx)$")
    # A layered stack: the flags of the two stacks it is made of.
    string(REGEX REPLACE "^(shm|mpi)_(tcp_wan|tcp|wan|ucx)$" "commx-\\1, commx-\\2" COMMX_PC_REQUIRES
           "${stack}")
    string(REPLACE "tcp_wan" "wan" COMMX_PC_REQUIRES "${COMMX_PC_REQUIRES}")
    set(COMMX_PC_LIBS "")
  endif()
  configure_file(cmake/pkgconfig/commx-stack.pc.in ${commx_pc_out}/commx-${stack}.pc @ONLY)
  list(APPEND commx_pc_files ${commx_pc_out}/commx-${stack}.pc)
endforeach()
install(FILES ${commx_pc_files} DESTINATION ${COMMX_PC_DIR})

# --- the Debian package: cpack -G DEB in a build directory -> commx_<version>_<arch>.deb ---------
set(CPACK_PACKAGE_NAME commx)
set(CPACK_PACKAGE_VENDOR "commx")
set(CPACK_PACKAGE_CONTACT "commx maintainers <commx@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION
    "Headers, CMake package (find_package(commx COMPONENTS inproc shm tcp wan mpi)), pkg-config
modules, and the commxrun launcher and commx-relay gateway forwarder.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.invalid/commx")
# What the installed headers and config need to compile a program; the tools' own libraries
# (libc, libstdc++, libfmt, libssl) are added by dpkg-shlibdeps.
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libfmt-dev, libcereal-dev, libasio-dev, libssl-dev, g++ (>= 4:12)")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "cmake (>= 3.21), pkg-config")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libopenmpi-dev | libmpich-dev, libpmix-dev, libsimgrid-dev, libucx-dev")
set(CPACK_GENERATOR DEB)
include(CPack)
