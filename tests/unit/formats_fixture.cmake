# make_profile: renders synthetic profiles (100k stacks, hostile names,
# empty) for the consumers in tests/integration/test_formats.py.
add_executable(make_profile ${CMAKE_CURRENT_LIST_DIR}/make_profile.c)
target_link_libraries(make_profile PRIVATE jprofcore)
list(APPEND JPROF_TEST_ENV "JPROF_MAKE_PROFILE=$<TARGET_FILE:make_profile>")
