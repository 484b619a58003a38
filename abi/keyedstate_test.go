package abi

import (
	"errors"
	"strings"
	"testing"
)

func keyed(kv ...string) []byte {
	st := []byte(KeyedStateMagic)
	for i := 0; i < len(kv); i += 2 {
		st = AppendKeyedEntry(st, []byte(kv[i]), []byte(kv[i+1]))
	}
	return st
}

func entries(t *testing.T, st []byte) string {
	t.Helper()
	var out []string
	if err := KeyedEntries(st, func(k, v []byte) error { out = append(out, string(k)+"="+string(v)); return nil }); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}

func TestMergeKeyedState(t *testing.T) {
	a, b := keyed("apple", "3", "fig", "1"), keyed("pear", "2")
	all := func([]byte) bool { return true }
	got, err := MergeKeyedState([][]byte{a, nil, b}, all)
	if err != nil || entries(t, got) != "apple=3 fig=1 pear=2" {
		t.Fatalf("merged %q, %v", got, err)
	}
	got, err = MergeKeyedState([][]byte{a, b}, func(k []byte) bool { return k[0] != 'f' })
	if err != nil || entries(t, got) != "apple=3 pear=2" {
		t.Fatalf("filtered %q, %v", got, err)
	}
	if got, err := MergeKeyedState(nil, all); err != nil || string(got) != KeyedStateMagic {
		t.Fatalf("no states: %q, %v", got, err)
	}
	if _, err := MergeKeyedState([][]byte{a, keyed("fig", "9")}, all); err == nil || !strings.Contains(err.Error(), `key "fig" is in the state of subtask 0 and of subtask 1`) {
		t.Errorf("shared key: %v", err)
	}
	if _, err := MergeKeyedState([][]byte{b, keyed("fig", "1", "fig", "2")}, all); err == nil || !strings.Contains(err.Error(), `key "fig" is twice in the state of subtask 1 (an operator must put each key once)`) {
		t.Errorf("key put twice: %v", err)
	}
	if _, err := MergeKeyedState([][]byte{a, []byte("\x01opaque")}, all); !errors.Is(err, ErrNotKeyedState) {
		t.Errorf("opaque state: %v", err)
	}
	if _, err := MergeKeyedState([][]byte{a[:len(a)-1]}, all); !errors.Is(err, ErrMalformedBatch) {
		t.Errorf("truncated state: %v", err)
	}
}
