package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/host/wasm"
)

func init() {
	register(command{
		Name:    "module",
		Summary: "manage the module registry: push, ls, inspect, rm",
		Run:     runModule,
	})
}

const moduleUsage = `push|ls|inspect|rm [flags] [args]

  weir module push NAME FILE [-version V]   validate FILE and store it as NAME@V
                                            (V defaults to the latest version + 1)
  weir module ls                            list every module version
  weir module inspect NAME[@V]|sha256:D     show one module version (latest by default)
  weir module rm NAME[@V]                   remove one version, or every version`

// defaultNATS is where weir looks for NATS when -nats is not given.
const defaultNATS = "nats://127.0.0.1:4222"

func runModule(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "module", moduleUsage)
	url := fs.String("nats", defaultNATS, "NATS server URL")
	version := fs.Int("version", 0, "version to push (0: the latest + 1)")
	bucket := fs.String("bucket", registry.DefaultBucket, "object store bucket of the registry")
	var pos []string
	rest := args
	for {
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	if len(pos) == 0 {
		fs.Usage()
		return usagef("module: missing subcommand (push, ls, inspect or rm)")
	}
	want := map[string]int{"push": 2, "ls": 0, "inspect": 1, "rm": 1}
	n, ok := want[pos[0]]
	if !ok {
		return usagef("module: unknown subcommand %q (push, ls, inspect or rm)", pos[0])
	}
	if len(pos)-1 != n {
		return usagef("module %s: want %d argument(s), got %d (see weir module -h)", pos[0], n, len(pos)-1)
	}
	var data []byte
	if pos[0] == "push" {
		var err error
		if data, err = os.ReadFile(pos[2]); err != nil {
			return fmt.Errorf("module push: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	nc, err := nats.Connect(*url, nats.Timeout(5*time.Second), nats.Name("weir module"))
	if err != nil {
		return fmt.Errorf("cannot reach NATS at %s: %w", *url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	reg, err := registry.Open(ctx, js, *bucket)
	if err != nil {
		return err
	}
	switch pos[0] {
	case "push":
		m, err := reg.Push(ctx, pos[1], data, *version, validateModule)
		if err != nil {
			return err
		}
		fmt.Fprintf(std.Out, "pushed %s sha256:%s (%d bytes)\n", m.Ref(), m.Digest, m.Size)
	case "ls":
		ms, err := reg.List(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(std.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tSIZE\tDIGEST\tPUSHED")
		for _, m := range ms {
			fmt.Fprintf(tw, "%s\t%d\t%d\tsha256:%.12s\t%s\n", m.Name, m.Version, m.Size, m.Digest, m.Pushed.Format(time.RFC3339))
		}
		return tw.Flush()
	case "inspect":
		m, err := reg.Inspect(ctx, pos[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(std.Out, "name:    %s\nversion: %d\nref:     %s\ndigest:  sha256:%s\nsize:    %d\npushed:  %s\n",
			m.Name, m.Version, m.Ref(), m.Digest, m.Size, m.Pushed.Format(time.RFC3339))
	case "rm":
		gone, err := reg.Remove(ctx, pos[1])
		if err != nil {
			return err
		}
		for _, m := range gone {
			fmt.Fprintf(std.Out, "removed %s\n", m.Ref())
		}
	}
	return nil
}

// validateModule runs the host's load-time checks on a module.
func validateModule(ctx context.Context, name string, data []byte) error {
	e, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		return fmt.Errorf("start wasm engine: %w", err)
	}
	defer e.Close(ctx)
	return e.Validate(ctx, name, data, wasm.Limits{})
}
