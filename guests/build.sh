#!/usr/bin/env bash
# Builds every non-Go guest from source into the .wasm committed next to it:
#
#   guests/c/examples/NAME.wasm               C, WASI reactor with wasi-libc
#   guests/c/examples/NAME.freestanding.wasm  C, freestanding (no libc)
#   guests/c/examples/NAME.simd.wasm          C, WASI reactor with -msimd128
#   guests/rust/examples/NAME.wasm            Rust (Debian rustc, no cargo)
#   guests/assemblyscript/examples/NAME.wasm  AssemblyScript (asc 0.28)
#   guests/wat/NAME.wasm                      hand-written WAT (wabt)
#
# and each SDK's sdktest/probe operator (C, Rust, AssemblyScript), which
# exercises what the examples do not, and
#
#   host/wasm/testdata/rustpanic.wasm         Rust, its function names kept
#
# Go guests are built by the tests themselves (guests/go/guestbuild).
#
#   guests/build.sh          rebuild the committed .wasm files
#   guests/build.sh -check   rebuild into a temporary directory and fail if
#                            any committed .wasm differs from its source
#
# Builds are reproducible: paths are relative to the repository root, and
# every custom section (names, producers, debug info) is stripped.
#
# Toolchains (Debian): clang lld wasi-libc libclang-rt-14-dev-wasm32 rustc
# libstd-rust-dev-wasm32 wabt; (npm) assemblyscript@0.28.20. The versions that
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

# RUSTC: Debian's rustc has the wasm32 standard library; a rustup rustc
# earlier on PATH usually does not.
RUSTC=${RUSTC:-/usr/bin/rustc}
CLANG=${CLANG:-clang}
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
  echo "$("$RUSTC" --version)"
  echo "asc $("$ASC" --version | sed 's/^Version //')"
  echo "wat2wasm $("$WAT2WASM" --version)"
}
toolchains >"$work/toolchains.txt"

# out DIR/NAME.wasm: where a build goes (the temp tree when checking).
out() {
  if [ "$check" = 1 ]; then
    mkdir -p "$work/out/$(dirname "$1")"
    echo "$work/out/$1"
  else
    echo "$1"
  fi
}

# done_build FILE LANG: strip a build, refuse imports the host does not
# provide (e.g. AssemblyScript's env.abort), and note it for the check.
done_build() {
  "$WASM_STRIP" "$1"
  done_named "$1" "$2"
}

# done_named FILE LANG: done_build, but the build keeps its custom
# sections (the name section a test reads the stack trace's names from).
done_named() {
  local bad
  bad=$("$WASM_OBJDUMP" -x -j Import "$1" | grep -- ' <- ' | grep -v -e ' <- weir\.' -e ' <- wasi_snapshot_preview1\.' || true)
  if [ -n "$bad" ]; then
    echo "$1: imports outside weir and wasi_snapshot_preview1:" >&2
    echo "$bad" >&2
    return 1
  fi
  echo "$1" >>"$work/built.$2"
}

build_c() {
  echo "== C (clang $("$CLANG" -dumpversion))" >&2
  for src in guests/c/examples/*.c guests/c/sdktest/*.c; do
    base=${src%.c}
    o=$(out "$base.wasm")
    "$CLANG" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -O2 -Wall -Wextra -Werror \
      -Wl,--stack-first -Wl,--strip-all -o "$o" "$src"
    done_build "$o" c
    o=$(out "$base.freestanding.wasm")
    "$CLANG" --target=wasm32 -nostdlib -O2 -Wall -Wextra -Werror \
      -Wl,--no-entry -Wl,--stack-first -Wl,--strip-all -o "$o" "$src"
    done_build "$o" c
  done
  # The examples once more with 128-bit SIMD, which lets clang vectorize.
  for src in guests/c/examples/*.c; do
    o=$(out "${src%.c}.simd.wasm")
    "$CLANG" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -msimd128 -O2 -Wall -Wextra -Werror \
      -Wl,--stack-first -Wl,--strip-all -o "$o" "$src"
    done_build "$o" c
  done
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
    done_build "$o" rust
  done
  # rustpanic keeps its functions' mangled names for TestTrapStackRustNames:
  # -C strip=debuginfo, not symbols, and no wasm-strip.
  src=host/wasm/testdata/rustpanic.rs
  o=$(out "${src%.rs}.wasm")
  "$RUSTC" "${rustflags[@]/#strip=symbols/strip=debuginfo}" --crate-type cdylib \
    --extern weir="$work/libweir.rlib" -o "$o" "$src"
  done_named "$o" rust
}

build_assemblyscript() {
  echo "== AssemblyScript ($("$ASC" --version))" >&2
  for src in guests/assemblyscript/examples/*.ts guests/assemblyscript/sdktest/*.ts; do
    o=$(out "${src%.ts}.wasm")
    # --exportStart: top-level code (the operator's constructor) runs as
    # _initialize, under the host's call deadline, not as a start function.
    "$ASC" "$src" -O3 --noAssert --exportStart _initialize \
      --use abort=guests/assemblyscript/weir/index/weirAbort -o "$o"
    done_build "$o" assemblyscript
  done
}

build_wat() {
  echo "== WAT ($("$WAT2WASM" --version))" >&2
  for src in guests/wat/*.wat; do
    o=$(out "${src%.wat}.wasm")
    "$WAT2WASM" "$src" -o "$o"
    done_build "$o" wat
  done
}

# The languages build in parallel; any failure fails the script.
pids=()
for lang in c rust assemblyscript wat; do
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
mapfile -t built < <(cat "$work"/built.*)

if [ "$check" = 1 ]; then
  if ! cmp -s "$work/toolchains.txt" guests/toolchains.txt; then
    echo "toolchains differ from those that built the committed guests (guests/toolchains.txt):" >&2
    diff guests/toolchains.txt "$work/toolchains.txt" >&2 || true
  fi
  stale=0
  for o in "${built[@]}"; do
    committed=${o#"$work/out/"}
    if ! cmp -s "$o" "$committed"; then
      echo "stale: $committed does not match its source (run guests/build.sh)" >&2
      stale=1
    fi
  done
  [ "$stale" = 0 ] && echo "all ${#built[@]} guest builds match their sources" >&2
  exit "$stale"
fi
cp "$work/toolchains.txt" guests/toolchains.txt
echo "built ${#built[@]} guests" >&2
