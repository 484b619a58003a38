package source

import "github.com/weirhq/weir/host"

// The sources satisfy the task runtime's Source interface structurally.
var (
	_ host.Source        = (*Core)(nil)
	_ host.Source        = (*JetStream)(nil)
	_ host.BoundedSource = (*JetStream)(nil)
)
