# One helper per target kind, so every library is declared the same way.

# weft_library(NAME SOURCES ... DEPS ...): a static library lib/<name> with public headers in
# lib/<name>/include, linked to DEPS.
function(weft_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(weft_${name} STATIC ${ARG_SOURCES})
  add_library(weft::${name} ALIAS weft_${name})
  target_include_directories(weft_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_link_libraries(weft_${name} PUBLIC ${ARG_DEPS})
  target_compile_options(weft_${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  # The declared weft dependencies, written to <build>/weft_library_deps.txt for the architecture
  # test, which holds them against ARCHITECTURE.md.
  set(weft_deps)
  foreach(d ${ARG_DEPS})
    if(d MATCHES "^weft::(.+)$")
      list(APPEND weft_deps ${CMAKE_MATCH_1})
    endif()
  endforeach()
  list(JOIN weft_deps " " weft_deps)
  set_property(GLOBAL APPEND PROPERTY WEFT_LIBRARY_DEPS "${name}: ${weft_deps}")
endfunction()

# weft_test(NAME SOURCES ... DEPS ... [LABELS ...]): a GoogleTest binary registered with ctest.
function(weft_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    WEFT_DATA_DIR="${WEFT_DATA_DIR}"
    WEFT_BINARY_DIR="${CMAKE_BINARY_DIR}")
  if(ARG_LABELS)
    gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
  else()
    gtest_discover_tests(${name} PROPERTIES LABELS "unit" DISCOVERY_TIMEOUT 60)
  endif()
endfunction()

# weft_bench(NAME SOURCES ... DEPS ... [DEFINES ...]): a bench executable in <build>/bin. Benches
# print figures and are not run by ctest; they read only the repository (data/) and link libraries,
# never test code.
function(weft_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;DEFINES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(ARG_DEFINES)
    target_compile_definitions(${name} PRIVATE ${ARG_DEFINES})
  endif()
endfunction()
