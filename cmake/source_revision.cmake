# Script mode (cmake -DSRC=... -DOUT=... -P source_revision.cmake), run at every build of a target
# that prints its source revision: writes OUT, a header defining ROTE_SOURCE_REVISION as
# `git describe --always --dirty` of SRC ("unknown" outside a git checkout), and rewrites it only
# when the revision changed, so an unchanged tree rebuilds nothing. A benchmark's figures then
# name the code they measured, and a binary left from an experiment shows "-dirty" or an older
# commit instead of passing for HEAD.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE failed ERROR_QUIET)
if(failed OR revision STREQUAL "")
  set(revision "unknown")
endif()
set(content "#pragma once\n#define ROTE_SOURCE_REVISION \"${revision}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL content)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${content}")
