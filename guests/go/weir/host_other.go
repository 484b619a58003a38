//go:build !wasip1

package weir

// Outside GOOS=wasip1 there is no host: the package compiles (so tools and
// vet work on every platform) but every host call fails.

func emitBatch(port int, b []byte) error {
	return &EmitError{Port: port, Status: -3}
}

func setError(string) {}

// Log writes one line to the host log, tagged with the operator's name.
// Outside wasm it does nothing.
func Log(level Level, msg string) {}

func snapshotWrite([]byte) int32 { return -3 }

func restoreRead([]byte) int32 { return -3 }
