package benchmarks

import "os"

var osReadFile = os.ReadFile
