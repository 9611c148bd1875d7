# SPDX-License-Identifier: BSL-1.0
# Debian packages with CPack, one per install component (CMakeLists.txt):
#   lib -> libredlock<SOVERSION>  the shared library
#   dev -> libredlock-dev         headers, CMake package, redlock.pc, the libredlock.so namelink
#   cli -> redlock-tools          the `redlock` tool
# Names: a runtime library package is named after its SONAME (Debian policy 8.1), so
# libredlock.so.0.1 ships in libredlock0.1; the next SONAME (every minor while 0.x) gets a new
# package that installs beside the old one, so that programs built against the old one keep
# running until they are rebuilt. The -dev package is unversioned: one set of headers at a time
# (policy 8.4). The tool goes in redlock-tools, as Redis's own command-line tools go in
# redis-tools: a package named plain `redlock` would read as the whole project.
#
# Packages need a shared library under /usr with the multiarch libdir (GNUInstallDirs gives
# lib/<triplet> only when the prefix is /usr at configure time): the `deb` preset configures that,
#   cmake --preset deb && cmake --build --preset deb --target package
# Other build trees get no package target. test/package/deb_test.sh builds, inspects, installs
# and uses the packages.
if(NOT REDLOCK_TOP_LEVEL)
  return()  # a parent project packages itself: our CPack settings would overwrite its own
endif()
if(NOT BUILD_SHARED_LIBS OR NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "Debian packages: off (they need BUILD_SHARED_LIBS=ON and "
    "CMAKE_INSTALL_PREFIX=/usr, as in the deb preset)")
  return()
endif()
set(REDLOCK_DEB_PACKAGES ON)  # test/CMakeLists.txt registers the package test on it

set(REDLOCK_DEB_RELEASE 1 CACHE STRING "Debian revision of the packages (version <project>-<revision>)")
set(REDLOCK_DEB_MAINTAINER "redlock-asio maintainers <maintainers@redlock-asio.invalid>" CACHE STRING
  "Maintainer field of the Debian packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME redlock-asio)
set(CPACK_PACKAGE_VENDOR redlock-asio)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_HOMEPAGE_URL ${PROJECT_HOMEPAGE_URL})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# Directories as Debian has them (755), whatever the umask of the one who builds.
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
  OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL lib dev)
if(REDLOCK_CLI)
  list(APPEND CPACK_COMPONENTS_ALL cli)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>-<revision>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE ${REDLOCK_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${REDLOCK_DEB_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE ${PROJECT_HOMEPAGE_URL})
set(CPACK_DEBIAN_PACKAGE_SOURCE redlock-asio)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)

# Depends: dpkg-shlibdeps reads what the ELF files link (libc, libstdc++, fmt, OpenSSL); the
# packages of one build depend on each other at exactly their version. The tool's libredlock is
# still in the build tree when dpkg-shlibdeps runs: the private directory lets it be found.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
find_program(REDLOCK_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(NOT REDLOCK_DPKG_SHLIBDEPS)
  message(WARNING "Debian packages: no dpkg-shlibdeps (package dpkg-dev): the packages will not "
    "depend on the shared libraries they link")
endif()
# DEBIAN/shlibs, so that packages built against ours depend on libredlock0.1 (>= this version).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_COMPONENT_DEV_DEPENDS lib)
set(CPACK_COMPONENT_CLI_DEPENDS lib)

# Each package's Description: its synopsis line, then the extended description (lines of at most
# 80 columns, which CPack indents).
set(_redlock_deb_about "redlock-asio takes a lock on a majority of N independent Redis masters
(the Redlock algorithm), with keep-alive, fair hand-over, readers and writers,
semaphores and fencing tokens, for C++20 programs built on Boost.Asio.")

get_target_property(_redlock_soversion redlock SOVERSION)
set(CPACK_DEBIAN_LIB_PACKAGE_NAME libredlock${_redlock_soversion})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LIB_DESCRIPTION "Redlock distributed locks for Boost.Asio - shared library
${_redlock_deb_about}

This package holds the shared library.")

# The public headers include Boost.Asio, and redlockConfig.cmake / redlock.pc find fmt and
# OpenSSL: the -dev package needs their -dev packages, Boost of the version built against.
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libredlock-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libboost${Boost_VERSION_MAJOR}.${Boost_VERSION_MINOR}-dev, libfmt-dev, libssl-dev")
set(CPACK_DEBIAN_DEV_DESCRIPTION "Redlock distributed locks for Boost.Asio - development files
${_redlock_deb_about}

This package holds the headers, the CMake package (find_package(redlock)) and
the pkg-config file (redlock.pc).")

set(CPACK_DEBIAN_CLI_PACKAGE_NAME redlock-tools)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_CLI_PACKAGE_SUGGESTS redis-server)  # for `redlock nodes up` (local masters)
set(CPACK_DEBIAN_CLI_DESCRIPTION "Redlock distributed locks for the shell
${_redlock_deb_about}

This package holds the redlock tool: like flock(1), but across machines, it
runs a command only while it holds a lock on a majority of the masters.")

# CPack 3.25 would put CPACK_PACKAGE_DESCRIPTION_SUMMARY (the project's description) before each
# description above, as its synopsis; cpack reads this file before it writes the packages.
file(WRITE ${PROJECT_BINARY_DIR}/CPackProjectConfig.cmake "unset(CPACK_PACKAGE_DESCRIPTION_SUMMARY)\n")
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_BINARY_DIR}/CPackProjectConfig.cmake)

# /usr/share/doc/<package>/copyright in each package. Excluded from a plain `cmake --install`,
# which installs no per-package documentation.
foreach(_component IN LISTS CPACK_COMPONENTS_ALL)
  string(TOUPPER ${_component} _upper)
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE RENAME copyright
    DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${CPACK_DEBIAN_${_upper}_PACKAGE_NAME}
    COMPONENT ${_component} EXCLUDE_FROM_ALL)
endforeach()

include(CPack)
