#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder image.
set -euo pipefail
apt-get update && apt-get install -y python3 python3-venv python3-pip make
VENV="${CLASSROOM_VENV:-/opt/classroom-venv}"     # outside the course's files, which
python3 -m venv "$VENV"                             # run_autograder closes to other users
# torch's CPU build (the grader needs no GPU; the default build pulls gigabytes of CUDA)
"$VENV/bin/pip" install --quiet --index-url "${TORCH_INDEX:-<<torch_index>>}" "<<torch>>"
"$VENV/bin/pip" install --quiet -e "${AUTOGRADER_ROOT:-/autograder}/source"
# Only the grader's jobs that may use torch get this group: exercise 3's cannot read it.
chgrp -R <<torch_gid>> "$VENV" && chmod -R g+rX,o-rwx "$VENV"
