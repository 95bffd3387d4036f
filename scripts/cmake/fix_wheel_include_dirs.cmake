# Passed as -DCMAKE_PROJECT_INCLUDE=<this file> when building bolt_agent_interfaces against the
# ROS 2 wheels from PyPI. Their exported *__rosidl_generator_py targets name the include
# directories of the machine that built them (/opt/python/cp311-cp311/...). At the end of
# configure, replace those with this interpreter's Python and numpy include directories.
# Harmless on a normal ROS 2 install (nothing matches).
cmake_minimum_required(VERSION 3.21)

if(NOT DEFINED Python3_EXECUTABLE)
  set(Python3_EXECUTABLE python3)
endif()
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c "import sysconfig; print(sysconfig.get_path('include'), end='')"
  OUTPUT_VARIABLE _bolt_py_include)
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c "import numpy; print(numpy.get_include(), end='')"
  OUTPUT_VARIABLE _bolt_np_include)

function(_bolt_fix_imported_include_dirs)
  get_property(_targets DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY IMPORTED_TARGETS)
  foreach(_t IN LISTS _targets)
    get_target_property(_dirs ${_t} INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT _dirs)
      continue()
    endif()
    set(_new "")
    foreach(_d IN LISTS _dirs)
      if(_d MATCHES "^/opt/python/cp[0-9]+-cp[0-9]+/include/python")
        list(APPEND _new "${_bolt_py_include}")
      elseif(_d MATCHES "^/opt/python/cp[0-9]+-cp[0-9]+/.*numpy/(_core/)?include$")
        list(APPEND _new "${_bolt_np_include}")
      else()
        list(APPEND _new "${_d}")
      endif()
    endforeach()
    set_target_properties(${_t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_new}")
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _bolt_fix_imported_include_dirs)
