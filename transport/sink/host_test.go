package sink

import "github.com/weirhq/weir/host"

// The sinks satisfy the task runtime's Sink interface structurally.
var (
	_ host.Sink = (*Core)(nil)
	_ host.Sink = (*AtLeastOnce)(nil)
	_ host.Sink = (*ExactlyOnce)(nil)
)
