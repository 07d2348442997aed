#!/bin/sh
# Builds the static guest agent: OUT=path ./build.sh
set -eu
cd "$(dirname "$0")"
OUT="${OUT:-den-agent}"
CC="${CC:-gcc}"
$CC -O2 -static -Wall -Wextra -Werror -o "$OUT" src/*.c
