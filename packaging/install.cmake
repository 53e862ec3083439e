# Installs what makes jprofd a system service: units, sysusers, the
# configuration file, man pages and bash completion (included from the top
# CMakeLists.txt). With CMAKE_INSTALL_PREFIX=/usr (the .deb) the paths are
# Debian 12's; with /usr/local they are the local ones systemd also searches.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_jprof_libdir_sys "/lib")
else()
  set(_jprof_libdir_sys "${CMAKE_INSTALL_PREFIX}/lib")
endif()
# -DJPROF_SYSTEMD_UNITDIR=... / -DJPROF_SYSUSERSDIR=... override these.
if(NOT JPROF_SYSTEMD_UNITDIR)
  set(JPROF_SYSTEMD_UNITDIR "${_jprof_libdir_sys}/systemd/system")
endif()
if(NOT JPROF_SYSUSERSDIR)
  set(JPROF_SYSUSERSDIR "${CMAKE_INSTALL_PREFIX}/lib/sysusers.d")
endif()

# ExecStart names the installed daemon.
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/packaging/systemd/jprofd.service
  ${CMAKE_CURRENT_BINARY_DIR}/packaging/jprofd.service @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/packaging/jprofd.service
  ${CMAKE_CURRENT_SOURCE_DIR}/packaging/systemd/jprofd.socket
  DESTINATION ${JPROF_SYSTEMD_UNITDIR})
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/packaging/jprofd.sysusers
  DESTINATION ${JPROF_SYSUSERSDIR} RENAME jprofd.conf)
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/packaging/man/jprofd.8
  DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/packaging/man/jprofctl.1
  DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/packaging/completion/jprofctl.bash
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME jprofctl)

# The daemon always reads /etc/jprofd/jprofd.conf. A source install keeps an
# existing file (the admin's edits); a staged install (DESTDIR, the .deb)
# always gets it, and dpkg treats it as a conffile.
install(CODE "
  set(_dst \"\$ENV{DESTDIR}/etc/jprofd/jprofd.conf\")
  if(\"\$ENV{DESTDIR}\" STREQUAL \"\" AND EXISTS \"\${_dst}\")
    message(STATUS \"Keeping: \${_dst}\")
  else()
    file(INSTALL \"${CMAKE_CURRENT_SOURCE_DIR}/packaging/jprofd.conf\"
         DESTINATION \"/etc/jprofd\" FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  endif()")
