package rustdemangle

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// realSymbols are names from the name sections of Rust operators built
// with rustc 1.63 (guests/rust/sdktest/probe.rs, host/wasm/testdata/
// rustpanic.rs and a module of trait impls for slices, arrays, tuples,
// pointers and fn pointers), each with what rustc-demangle's {:#} (and
// c++filt, less the hash) makes of it.
var realSymbols = []struct{ in, want string }{
	{"_ZN9rustpanic4each17h30710abc54afbcb9E", "rustpanic::each"},
	{"_ZN4weir7Runtime7process17hd75dd10d1f4fbbebE", "weir::Runtime::process"},
	{"_ZN47_$LT$probe..Probe$u20$as$u20$weir..Operator$GT$7process17h53750a72f7ed12e4E", "<probe::Probe as weir::Operator>::process"},
	{"_ZN62_$LT$rustpanic..Checked$LT$F$GT$$u20$as$u20$weir..Operator$GT$7process17hbc27cce7d1206d79E", "<rustpanic::Checked<F> as weir::Operator>::process"},
	{"_ZN3std9panicking19begin_panic_handler28_$u7b$$u7b$closure$u7d$$u7d$17h106d97be21bfe094E", "std::panicking::begin_panic_handler::{{closure}}"},
	{"_ZN4weir7Runtime18install_panic_hook28_$u7b$$u7b$closure$u7d$$u7d$17hfef73dc2713f4610E", "weir::Runtime::install_panic_hook::{{closure}}"},
	{"_ZN3std10sys_common9backtrace26__rust_end_short_backtrace17h541c65d4ea74e8baE", "std::sys_common::backtrace::__rust_end_short_backtrace"},
	{"_ZN4core9panicking9panic_fmt17h9ec1c8305a7da9aeE", "core::panicking::panic_fmt"},
	{"_ZN5alloc3vec16Vec$LT$T$C$A$GT$11resize_with17h546be97e0b5223cdE", "alloc::vec::Vec<T,A>::resize_with"},
	{"_ZN5alloc7raw_vec19RawVec$LT$T$C$A$GT$7reserve21do_reserve_and_handle17h2edc15552e200f23E", "alloc::raw_vec::RawVec<T,A>::reserve::do_reserve_and_handle"},
	{"_ZN42_$LT$$RF$T$u20$as$u20$core..fmt..Debug$GT$3fmt17h7d87ca53b8cb8d72E", "<&T as core::fmt::Debug>::fmt"},
	{"_ZN50_$LT$$RF$mut$u20$W$u20$as$u20$core..fmt..Write$GT$9write_str17h19beb5fcbb29bbf4E", "<&mut W as core::fmt::Write>::write_str"},
	{"_ZN66_$LT$weir..Error$u20$as$u20$core..convert..From$LT$$RF$str$GT$$GT$4from17hbd7f3352d039db18E", "<weir::Error as core::convert::From<&str>>::from"},
	{"_ZN4core3ptr121drop_in_place$LT$$RF$alloc..boxed..Box$LT$dyn$u20$std..error..Error$u2b$core..marker..Send$u2b$core..marker..Sync$GT$$GT$17h07cf8f8a8bd81339E.llvm.2127609134216655508",
		"core::ptr::drop_in_place<&alloc::boxed::Box<dyn std::error::Error+core::marker::Send+core::marker::Sync>>"},
	{"_ZN242_$LT$std..error..$LT$impl$u20$core..convert..From$LT$alloc..string..String$GT$$u20$for$u20$alloc..boxed..Box$LT$dyn$u20$std..error..Error$u2b$core..marker..Send$u2b$core..marker..Sync$GT$$GT$..from..StringError$u20$as$u20$core..fmt..Debug$GT$3fmt17h03e921e2629a3fe4E",
		"<std::error::<impl core::convert::From<alloc::string::String> for alloc::boxed::Box<dyn std::error::Error+core::marker::Send+core::marker::Sync>>::from::StringError as core::fmt::Debug>::fmt"},
	{"_ZN3std9panicking11panic_count17LOCAL_PANIC_COUNT7__getit17h31a60053826db328E.llvm.14804994494143224647", "std::panicking::panic_count::LOCAL_PANIC_COUNT::__getit"},
	{"_ZN8dlmalloc8dlmalloc17Dlmalloc$LT$A$GT$13dispose_chunk17h0bf2da642cf9e3e2E.llvm.10904875061193490578", "dlmalloc::dlmalloc::Dlmalloc<A>::dispose_chunk"},
	{"_ZN46_$LT$$RF$$u5b$u8$u5d$$u20$as$u20$sym..Name$GT$4name17haccb05d1d10c8055E", "<&[u8] as sym::Name>::name"},
	{"_ZN54_$LT$$u5b$u16$u3b$$u20$3$u5d$$u20$as$u20$sym..Name$GT$4name17ha6a3537134170ed6E", "<[u16; 3] as sym::Name>::name"},
	{"_ZN46_$LT$$LP$u8$C$u16$RP$$u20$as$u20$sym..Name$GT$4name17h43efb14088e81ed7E", "<(u8,u16) as sym::Name>::name"},
	{"_ZN38_$LT$$LP$$RP$$u20$as$u20$sym..Name$GT$4name17h83fd3b9c249337fcE", "<() as sym::Name>::name"},
	{"_ZN46_$LT$$BP$const$u20$u8$u20$as$u20$sym..Name$GT$4name17hc70cf2f063ee4cd8E", "<*const u8 as sym::Name>::name"},
	// Legacy mangling writes "-" as ".": "->" comes out ".>", as in
	// rustc-demangle.
	{"_ZN59_$LT$fn$LP$u8$RP$$u20$.$GT$$u20$u8$u20$as$u20$sym..Name$GT$4name17hbba4b98c2b8ff9fdE", "<fn(u8) .> u8 as sym::Name>::name"},
}

func TestDemangleRealSymbols(t *testing.T) {
	for _, c := range realSymbols {
		got, ok := Demangle(c.in)
		if !ok || got != c.want {
			t.Errorf("Demangle(%q) = %q, %v; want %q, true", c.in, got, ok, c.want)
		}
	}
}

// TestDemangleEdges: what Demangle takes (a symbol it can read whole) and
// what it leaves as it is.
func TestDemangleEdges(t *testing.T) {
	for _, c := range []struct {
		in, want string // want "" for: left unchanged
	}{
		// Not legacy Rust symbols.
		{"", ""},
		{"weir_process", ""},
		{"rust_begin_unwind", ""},
		{"$145", ""},
		{"_RNvCs1234_4weir7process", ""}, // v0 mangling
		{"_ZN3foo3barEv", ""},            // C++: parameters after the E
		{"_Z3fooi", ""},
		{"ZN3fooE", ""},
		{"__ZN3fooE", ""},
		// Structure.
		{"_ZN", ""},
		{"_ZNE", ""},                             // no component
		{"_ZN3foo", ""},                          // no E
		{"_ZN4fooE", ""},                         // the length runs over the E
		{"_ZN3foE", ""},                          // ...and past the end
		{"_ZN03fooE", ""},                        // zero-led length
		{"_ZN0E", ""},                            // empty component
		{"_ZN3fooX", ""},                         // neither a length nor E
		{"_ZN3foo3barEE", ""},                    // a suffix not starting with "."
		{"_ZN99999999999999999999999999foo", ""}, // a length that would overflow
		{"_ZN18446744073709551617fooE", ""},
		{"_ZN3fooE", "foo"},
		{"_ZN3foo3barE", "foo::bar"},
		// The hash: "h" and 16 hex digits, last, after another component.
		{"_ZN3foo17h0123456789abcdefE", "foo"},
		{"_ZN3foo17h0123456789ABCDEFE", "foo"},
		{"_ZN17h0123456789abcdefE", "h0123456789abcdef"}, // alone: a name
		{"_ZN3foo5h1234E", "foo::h1234"},
		{"_ZN3foo17h0123456789abcdegE", "foo::h0123456789abcdeg"},
		{"_ZN17h0123456789abcdef3fooE", "h0123456789abcdef::foo"},
		// Suffixes.
		{"_ZN3foo17h0123456789abcdefE.llvm.1234ABCD", "foo"},
		{"_ZN3foo17h0123456789abcdefE.llvm.12@34", "foo"},
		{"_ZN3fooE.cold", "foo.cold"},
		{"_ZN3fooE.llvm.xyz", "foo.llvm.xyz"},
		{"_ZN3fooE.llvm.", "foo.llvm."},
		{"_ZN3fooE.a b", ""},
		{"_ZN3fooE.a\nb", ""},
		{"_ZN3fooE.\x7f", ""},
		// Dots and escapes.
		{"_ZN3a.bE", "a.b"},
		{"_ZN4a..bE", "a::b"},
		{"_ZN5a...bE", "a::.b"},
		{"_ZN10_$LT$a$GT$E", "<a>"}, // "_" before a leading "$" dropped
		{"_ZN7a_$u7e$E", "a_~"},     // not elsewhere
		{"_ZN2__E", "__"},
		{"_ZN1_E", "_"},
		{"_ZN4$SP$E", "@"},
		{"_ZN4$BP$E", "*"},
		{"_ZN4$RF$E", "&"},
		{"_ZN4$LP$E", "("},
		{"_ZN4$RP$E", ")"},
		{"_ZN3$C$E", ","},
		{"_ZN5$u7e$E", "~"},
		{"_ZN5$u22$E", `"`},
		{"_ZN5$u2b$E", "+"},
		{"_ZN5$u20$E", " "},
		{"_ZN8$u1f600$E", "😀"},
		{"_ZN7$u00e9$E", "é"},
		{"_ZN41$SP$$BP$$RF$$LP$$RP$$C$$u7e$$u22$$u1f600$E.cold", `@*&(),~"😀.cold`},
		{"_ZN2$$E", ""},   // empty escape
		{"_ZN3$u$E", ""},  // no digits
		{"_ZN4$XX$E", ""}, // unknown
		{"_ZN3$LTE", ""},  // unterminated
		{"_ZN1$E", ""},
		{"_ZN5$u7E$E", ""},       // upper-case hex
		{"_ZN5$u0a$E", ""},       // newline
		{"_ZN5$u00$E", ""},       // NUL
		{"_ZN5$u7f$E", ""},       // DEL
		{"_ZN5$u85$E", ""},       // C1 control
		{"_ZN7$u202e$E", ""},     // right-to-left override
		{"_ZN7$ud800$E", ""},     // surrogate
		{"_ZN9$u110000$E", ""},   // past Unicode
		{"_ZN10$u1000000$E", ""}, // too many digits
		{"_ZN6$u+7e$E", ""},
		{"_ZN3a-bE", ""}, // a character rustc escapes
		{"_ZN3a bE", ""},
		{"_ZN3a\nbE", ""},
		{"_ZN2\xc3\xa9E", ""}, // not ASCII
		{"_ZN3fooE.\xc3\xa9", ""},
	} {
		want, wantOK := c.want, true
		if want == "" {
			want, wantOK = c.in, false
		}
		got, ok := Demangle(c.in)
		if got != want || ok != wantOK {
			t.Errorf("Demangle(%q) = %q, %v; want %q, %v", c.in, got, ok, want, wantOK)
		}
	}
}

// FuzzDemangle: Demangle never panics; what it refuses comes back
// unchanged; what it takes comes out shorter, valid UTF-8 and printable
// (one line), and only from a "_ZN" symbol.
func FuzzDemangle(f *testing.F) {
	for _, c := range realSymbols {
		f.Add(c.in)
	}
	f.Add("_ZN3foo17h0123456789abcdefE.llvm.1234ABCD")
	f.Add("_ZN8$u1f600$E")
	f.Add("_ZN5$u0a$E")
	f.Add("_RNvCs1234_4weir7process")
	f.Fuzz(func(t *testing.T, in string) {
		got, ok := Demangle(in)
		if !ok {
			if got != in {
				t.Fatalf("Demangle(%q) refused but returned %q", in, got)
			}
			return
		}
		if !strings.HasPrefix(in, "_ZN") {
			t.Fatalf("Demangle(%q) = %q: took what is not a legacy symbol", in, got)
		}
		if len(got) >= len(in) {
			t.Fatalf("Demangle(%q) = %q: not shorter", in, got)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("Demangle(%q) = %q: not UTF-8", in, got)
		}
		for _, r := range got {
			if !unicode.IsPrint(r) {
				t.Fatalf("Demangle(%q) = %q: %U does not print", in, got, r)
			}
		}
		if again, _ := Demangle(in); again != got {
			t.Fatalf("Demangle(%q) = %q, then %q", in, got, again)
		}
	})
}
