#!/usr/bin/env bash
# Builds every committed .wasm that has a source in the repository, from that
# source, into the .wasm committed next to it:
#
#   guests/c/examples/NAME.wasm               C, WASI reactor with wasi-libc
#   guests/c/examples/NAME.freestanding.wasm  C, freestanding (no libc)
#   guests/c/examples/NAME.simd.wasm          C, WASI reactor with -msimd128
#   guests/cpp/examples/NAME.wasm             C++ (weir.h), WASI reactor with
#                                             libc++, -fno-exceptions
#   guests/rust/examples/NAME.wasm            Rust (Debian rustc, no cargo)
#   guests/assemblyscript/examples/NAME.wasm  AssemblyScript (asc 0.28)
#   guests/assemblyscript/sdktest/probe.wasm  AssemblyScript, its function
#                                             names kept
#   guests/wat/NAME.wasm                      hand-written WAT (wabt)
#
# and each SDK's sdktest/probe operator (C, C++, Rust, AssemblyScript),
# which exercises what the examples do not (C++'s is two files, which both
# include weir.h), and the host's test modules:
#
#   host/wasm/testdata/rustpanic.wasm         Rust, its function names kept
#   host/wasm/testdata/cpptrap.wasm           C++, its function names kept
#                                             mangled
#   host/wasm/testdata/{assert,overflow,dwarf}.wasm
#                                             C, each built as its header
#                                             says (dwarf.wasm keeps its
#                                             DWARF: that is its point)
#   host/wasm/testdata/NAME.wasm              WAT, function names kept
#   host/wasm/testdata/bad/NAME.wasm          WAT the host must refuse, not
#                                             validated (wat2wasm --no-check)
#
# Go guests are built by the tests themselves (guests/go/guestbuild) and are
# not committed.
#
#   guests/build.sh          rebuild the committed .wasm files
#   guests/build.sh -check   rebuild into a temporary directory and fail if
#                            any committed .wasm differs from its source
#
# Either way, the script fails naming every committed .wasm (git ls-files)
# that it does not build, unless its list "handmade" names it with why.
#
# Builds are reproducible: paths are relative to the repository root (or,
# for the C test modules, to their directory), and every custom section
# (names, producers, debug info) is stripped but where a test reads it.
#
# Toolchains (Debian): clang lld wasi-libc libclang-rt-14-dev-wasm32
# libc++-14-dev-wasm32 libc++abi-14-dev-wasm32 rustc libstd-rust-dev-wasm32
# wabt; (npm) assemblyscript@0.28.20. The versions that
# built the committed files are in guests/toolchains.txt; others build
# different bytes, which -check reports.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  "") ;;
  -check) check=1 ;;
  *) echo "usage: guests/build.sh [-check]" >&2; exit 2 ;;
esac

# handmade: the committed .wasm files that no source here builds, on
# purpose, one a line: the path from the repository root, then why no tool
# can produce it (e.g. a deliberately malformed binary). None today: a
# test that needs a module no tool writes can make it from a built one, as
# TestLocalsBomb does from testdata/bad/locals.wasm.
handmade='
'

# RUSTC: Debian's rustc has the wasm32 standard library; a rustup rustc
# earlier on PATH usually does not.
RUSTC=${RUSTC:-/usr/bin/rustc}
CLANG=${CLANG:-clang}
CLANGXX=${CLANGXX:-clang++}
ASC=${ASC:-asc}
WAT2WASM=${WAT2WASM:-wat2wasm}
WASM_STRIP=${WASM_STRIP:-wasm-strip}
WASM_OBJDUMP=${WASM_OBJDUMP:-wasm-objdump}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The committed builds are byte-for-byte what these versions produce
# (Debian 12's clang 14 and rustc 1.63); guests/toolchains.txt records them.
toolchains() {
  echo "clang $("$CLANG" -dumpversion)"
  # libc++'s version (_LIBCPP_VERSION), which the C++ builds link.
  echo "libc++ $(echo '#include <ciso646>' | "$CLANGXX" --target=wasm32-wasi --sysroot=/usr -x c++ -E -dM - |
    sed -n 's/^#define _LIBCPP_VERSION //p')"
  echo "$("$RUSTC" --version)"
  echo "asc $("$ASC" --version | sed 's/^Version //')"
  echo "wat2wasm $("$WAT2WASM" --version)"
}
toolchains >"$work/toolchains.txt"

# out PATH: where the build of PATH (from the repository root) goes: PATH
# itself, or its place in the temporary tree when checking. Absolute, so a
# build can run in its source's directory.
out() {
  if [ "$check" = 1 ]; then
    mkdir -p "$work/out/$(dirname "$1")"
    echo "$work/out/$1"
  else
    echo "$PWD/$1"
  fi
}

# rel OUT: the committed file whose build is OUT (the inverse of out).
rel() {
  local r=${1#"$work/out/"}
  echo "${r#"$PWD/"}"
}

# done_build OUT SRC LANG: strip a build, refuse imports the host does not
# provide (e.g. AssemblyScript's env.abort), and note it for the check.
done_build() {
  "$WASM_STRIP" "$1"
  done_named "$@"
}

# done_named OUT SRC LANG: done_build, but the build keeps its custom
# sections (the names a test reads from a stack trace, DWARF).
done_named() {
  local bad=
  # (wasm-objdump -j fails on a module without the section, e.g. one that
  # imports nothing.)
  if "$WASM_OBJDUMP" -h "$1" | grep -q '^ *Import '; then
    bad=$("$WASM_OBJDUMP" -x -j Import "$1" | grep -- ' <- ' | grep -v -e ' <- weir\.' -e ' <- wasi_snapshot_preview1\.' || true)
  fi
  if [ -n "$bad" ]; then
    echo "$(rel "$1"): imports outside weir and wasi_snapshot_preview1:" >&2
    echo "$bad" >&2
    return 1
  fi
  done_raw "$@"
}

# done_raw OUT SRC LANG: note a build for the check as it is, its imports
# unchecked: a module the host must refuse, whose imports may be its point.
done_raw() {
  printf '%s\t%s\n' "$(rel "$1")" "$2" >>"$work/built.$3"
}

build_c() {
  echo "== C (clang $("$CLANG" -dumpversion))" >&2
  for src in guests/c/examples/*.c guests/c/sdktest/*.c; do
    base=${src%.c}
    o=$(out "$base.wasm")
    "$CLANG" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -O2 -Wall -Wextra -Werror -I guests/c \
      -Wl,--stack-first -Wl,--strip-all -o "$o" "$src"
    done_build "$o" "$src" c
    o=$(out "$base.freestanding.wasm")
    "$CLANG" --target=wasm32 -nostdlib -O2 -Wall -Wextra -Werror -I guests/c \
      -Wl,--no-entry -Wl,--stack-first -Wl,--strip-all -o "$o" "$src"
    done_build "$o" "$src" c
  done
  # The examples once more with 128-bit SIMD, which lets clang vectorize.
  for src in guests/c/examples/*.c; do
    o=$(out "${src%.c}.simd.wasm")
    "$CLANG" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -msimd128 -O2 -Wall -Wextra -Werror -I guests/c \
      -Wl,--stack-first -Wl,--strip-all -o "$o" "$src"
    done_build "$o" "$src" c
  done
  # The host's C test modules, built in their directory, which the paths in
  # dwarf.wasm's DWARF and in assert.wasm's message are relative to; -O1.
  local td=host/wasm/testdata
  local cflags=(-O1 -Wall -Wextra -Werror -I ../../../guests/c)
  # assert: wasi-libc's assert (its message cites assert.c), stripped.
  o=$(out $td/assert.wasm)
  (cd $td && "$CLANG" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor "${cflags[@]}" \
    -Wl,--stack-first -Wl,--strip-all -o "$o" assert.c)
  done_build "$o" $td/assert.c c
  # overflow: its name section kept, for the recursion the error names.
  o=$(out $td/overflow.wasm)
  (cd $td && "$CLANG" --target=wasm32 -nostdlib "${cflags[@]}" \
    -Wl,--no-entry -Wl,--stack-first -o "$o" overflow.c)
  done_named "$o" $td/overflow.c c
  # dwarf: -g, its DWARF sections kept (TestTrapStackWithDWARF's subject).
  o=$(out $td/dwarf.wasm)
  (cd $td && "$CLANG" --target=wasm32 -nostdlib "${cflags[@]}" -g -fdebug-prefix-map="$PWD=." \
    -Wl,--no-entry -o "$o" dwarf.c)
  done_named "$o" $td/dwarf.c c
}

# C++ through the C SDK, as guests/README.md builds it: libc++ is built
# without exceptions, so -fno-exceptions (its headers' throws would not
# link); weir.h's operator new turns an allocation failure into an error.
build_cpp() {
  echo "== C++ (clang++ $("$CLANGXX" -dumpversion))" >&2
  local cxxflags=(--target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -std=c++17 -fno-exceptions
    -O2 -Wall -Wextra -Werror -I guests/c -Wl,--stack-first -Wl,--strip-all)
  for src in guests/cpp/examples/*.cpp; do
    o=$(out "${src%.cpp}.wasm")
    "$CLANGXX" "${cxxflags[@]}" -o "$o" "$src"
    done_build "$o" "$src" cpp
  done
  o=$(out guests/cpp/sdktest/probe.wasm)
  "$CLANGXX" "${cxxflags[@]}" -o "$o" guests/cpp/sdktest/probe.cpp guests/cpp/sdktest/emit.cpp
  done_build "$o" guests/cpp/sdktest/probe.cpp cpp
  # cpptrap keeps its functions' mangled names for TestTrapStackCppNames:
  # -O1, its name section kept (-Wl,--strip-debug, not --strip-all, and no
  # wasm-strip), and wasm-ld told -no-demangle, which it otherwise is not:
  # it writes a C++ name demangled by default, and clang's driver drops a
  # -Wl,--no-demangle (two dashes) for the wasm targets; wasm-ld reads the
  # option with one dash as with two.
  local src=host/wasm/testdata/cpptrap.cpp
  o=$(out "${src%.cpp}.wasm")
  "$CLANGXX" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -std=c++17 -fno-exceptions \
    -O1 -Wall -Wextra -Werror -I guests/c -Wl,--stack-first -Wl,--strip-debug -Wl,-no-demangle -o "$o" "$src"
  done_named "$o" "$src" cpp
}

build_rust() {
  echo "== Rust ($("$RUSTC" --version))" >&2
  local rustflags=(--edition 2021 --target wasm32-unknown-unknown -C opt-level=3 -C debuginfo=0
    -C strip=symbols -D warnings --remap-path-prefix="$PWD=.")
  "$RUSTC" "${rustflags[@]}" --crate-type rlib --crate-name weir \
    -o "$work/libweir.rlib" guests/rust/weir/lib.rs
  for src in guests/rust/examples/*.rs guests/rust/sdktest/*.rs; do
    o=$(out "${src%.rs}.wasm")
    "$RUSTC" "${rustflags[@]}" --crate-type cdylib --extern weir="$work/libweir.rlib" \
      -o "$o" "$src"
    done_build "$o" "$src" rust
  done
  # rustpanic keeps its functions' mangled names for TestTrapStackRustNames:
  # -C strip=debuginfo, not symbols, and no wasm-strip.
  src=host/wasm/testdata/rustpanic.rs
  o=$(out "${src%.rs}.wasm")
  "$RUSTC" "${rustflags[@]/#strip=symbols/strip=debuginfo}" --crate-type cdylib \
    --extern weir="$work/libweir.rlib" -o "$o" "$src"
  done_named "$o" "$src" rust
}

build_assemblyscript() {
  echo "== AssemblyScript ($("$ASC" --version))" >&2
  for src in guests/assemblyscript/examples/*.ts guests/assemblyscript/sdktest/*.ts; do
    o=$(out "${src%.ts}.wasm")
    # --exportStart: top-level code (the operator's constructor) runs as
    # _initialize, under the host's call deadline, not as a start function.
    # The files import the SDK as the package "weir", as a user's do:
    # --path names the directory that holds it (weir/index.ts). --debug
    # writes a name section and changes nothing else (no --sourceMap), as
    # guests/sourcebuild builds a user's file: the probe keeps it, for the
    # function TestAssemblyScriptTrapStack finds in its trap's stack; the
    # rest are stripped.
    "$ASC" "$src" -O3 --noAssert --debug --exportStart _initialize \
      --path guests/assemblyscript --use abort=~lib/weir/index/weirAbort -o "$o"
    if [ "$src" = guests/assemblyscript/sdktest/probe.ts ]; then
      done_named "$o" "$src" assemblyscript
    else
      done_build "$o" "$src" assemblyscript
    fi
  done
}

build_wat() {
  echo "== WAT ($("$WAT2WASM" --version))" >&2
  for src in guests/wat/*.wat; do
    o=$(out "${src%.wat}.wasm")
    "$WAT2WASM" "$src" -o "$o"
    done_build "$o" "$src" wat
  done
  # The host's test operators keep their function names (--debug-names)
  # for the stack traces of their traps.
  for src in host/wasm/testdata/*.wat; do
    o=$(out "${src%.wat}.wasm")
    "$WAT2WASM" --debug-names "$src" -o "$o"
    done_named "$o" "$src" wat
  done
  # The modules the host must refuse are not validated: bad_body.wat does
  # not type-check, and the imports of others are what is refused.
  for src in host/wasm/testdata/bad/*.wat; do
    o=$(out "${src%.wat}.wasm")
    "$WAT2WASM" --no-check "$src" -o "$o"
    done_raw "$o" "$src" wat
  done
}

# The languages build in parallel; any failure fails the script.
pids=()
for lang in c cpp rust assemblyscript wat; do
  ( set -e; "build_$lang" ) &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
if [ "$failed" = 1 ]; then
  echo "guests/build.sh: a build failed (see above)" >&2
  exit 1
fi

# built: each build's committed path -> its source.
declare -A built=()
while IFS=$'\t' read -r o src; do
  built[$o]=$src
done < <(cat "$work"/built.*)

# Every committed .wasm is built here or listed as hand-made, with why.
if ! committed_list=$(git ls-files '*.wasm'); then
  echo "guests/build.sh: git ls-files failed: run it in a git checkout of the repository" >&2
  exit 1
fi
declare -A committed=()
while read -r f; do
  [ -n "$f" ] || continue
  committed[$f]=1
done <<<"$committed_list"
bad=0
declare -A made=()
while read -r f why; do
  [ -n "$f" ] || continue
  made[$f]=1
  if [ -z "$why" ]; then
    echo "handmade: $f: say why no tool can build it, after its path (guests/build.sh)" >&2
    bad=1
  elif [ -n "${built[$f]+x}" ]; then
    echo "handmade: $f is built from ${built[$f]}: remove it from the list in guests/build.sh" >&2
    bad=1
  elif [ -z "${committed[$f]+x}" ]; then
    echo "handmade: $f is not committed: remove it from the list in guests/build.sh" >&2
    bad=1
  fi
done <<<"$handmade"
while read -r f; do
  [ -n "$f" ] || continue
  if [ -z "${built[$f]+x}" ] && [ -z "${made[$f]+x}" ]; then
    echo "orphan: $f is committed but guests/build.sh does not build it: add its build there, or list it as hand-made with why" >&2
    bad=1
  fi
done <<<"$committed_list"

if [ "$check" = 1 ]; then
  if ! cmp -s "$work/toolchains.txt" guests/toolchains.txt; then
    echo "toolchains differ from those that built the committed guests (guests/toolchains.txt):" >&2
    diff guests/toolchains.txt "$work/toolchains.txt" >&2 || true
  fi
  while read -r f; do
    if [ -z "${committed[$f]+x}" ]; then
      echo "uncommitted: $f is what ${built[$f]} builds but is not committed (run guests/build.sh and git add it)" >&2
      bad=1
    elif ! cmp -s "$work/out/$f" "$f"; then
      echo "stale: $f does not match its source ${built[$f]} (run guests/build.sh)" >&2
      bad=1
    fi
  done < <(printf '%s\n' "${!built[@]}" | sort)
  if [ "$bad" = 0 ]; then
    echo "all ${#built[@]} builds match their sources; every other committed .wasm (${#made[@]}) is listed as hand-made" >&2
  fi
  exit "$bad"
fi
cp "$work/toolchains.txt" guests/toolchains.txt
echo "built ${#built[@]} .wasm files" >&2
exit "$bad"
