package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weirhq/weir/cmd/weir/internal/node"
)

// servedFile is the file in a data directory where weir up notes the
// client URL of the embedded NATS server it serves the directory on
// ("nats://127.0.0.1:5333"). weir run -data, whose own server takes a free
// port and goes with the run, names from it where weir up serves the
// directory's jobs (servedBy): on the port weir up was given, not on the
// default one.
const servedFile = "weir-up.url"

// noteServed writes servedFile in dir: weir up serves dir with its
// embedded server on clientURL. The file is a hint for weir run -data's
// advice, no reason for weir up not to serve: an error says on which file
// and what weir run -data cannot name then, for weir up to print.
func noteServed(dir, clientURL string) error {
	file := filepath.Join(dir, servedFile)
	if err := os.WriteFile(file, []byte(clientURL+"\n"), 0o644); err != nil {
		port := clientURL
		if u, perr := url.Parse(clientURL); perr == nil && u.Port() != "" {
			port = u.Port()
		}
		return fmt.Errorf("note the NATS URL in %s: %w; weir run -data %s cannot name port %s in its advice: remove or fix that file",
			file, unwrapPath(err), shellQuote(dir), port)
	}
	return nil
}

// unwrapPath returns the cause of a *fs.PathError, whose path the caller
// names already, else err.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// dataServe says where weir up serves a data directory's jobs: the
// command that starts it so and the URL its NATS takes clients on.
type dataServe struct {
	dir string // the data directory; "": none (weir run without -data)
	up  string // "weir up -data DIR -port 5333"
	// url is the URL clients reach weir up's NATS on, "nats://127.0.0.1:5333";
	// "" when DIR's servedFile does not say (unreadable, or not a URL
	// weir up notes there): the commands printed name it URL then, rather
	// than a port weir up may not serve on.
	url string
}

// servedBy returns where weir up serves dir: where it did last, as it
// noted in servedFile, else (no such file) where weir up's defaults serve
// it. The zero dataServe for dir "".
func servedBy(dir string) dataServe {
	if dir == "" {
		return dataServe{}
	}
	b, err := os.ReadFile(filepath.Join(dir, servedFile))
	noted := strings.TrimSpace(string(b))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return serveAt(dir, "")
	case err != nil || noted == "":
		// Unreadable, or cut short as it was written.
		return dataServe{dir: dir, up: "weir up -data " + shellQuote(dir)}
	}
	return serveAt(dir, noted)
}

// serveAt returns where weir up serves dir with its embedded server on
// clientURL ("": weir up's defaults, 127.0.0.1:4222): the host and port
// flags that put it there, and the URL a client connects to (a server
// listening on every address, or on the empty host weir up takes as
// 127.0.0.1, takes clients on 127.0.0.1). A clientURL with no scheme is
// nats://, as for nats.go; one that names no server and port (a file
// edited by hand) gives the url "".
func serveAt(dir, clientURL string) dataServe {
	d := dataServe{dir: dir, up: "weir up -data " + shellQuote(dir), url: defaultNATS}
	if clientURL == "" {
		return d
	}
	host, port, ok := parseServed(clientURL)
	if !ok {
		d.url = ""
		return d
	}
	if host != "127.0.0.1" {
		d.up += " -host " + shellQuote(host)
	}
	if port != "4222" {
		d.up += " -port " + port
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	d.url = "nats://" + net.JoinHostPort(host, port)
	return d
}

// parseServed returns the host and port of the client URL weir up noted,
// "nats://127.0.0.1:5333": an empty host is weir up's -host default,
// 127.0.0.1. ok is false for anything else: another scheme, no port or
// one out of range, a path, a user.
func parseServed(clientURL string) (host, port string, ok bool) {
	if !strings.Contains(clientURL, "://") {
		clientURL = "nats://" + clientURL
	}
	u, err := url.Parse(clientURL)
	if err != nil || u.Scheme != "nats" || u.User != nil || u.Opaque != "" || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.Fragment != "" {
		return "", "", false
	}
	host, port = u.Hostname(), u.Port()
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", "", false
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return host, port, true
}

// hint is natsFlags.hint for d's server: the -nats a weir command needs to
// reach it, "" for the default one, " -nats URL" where d does not know it.
func (d dataServe) hint() string {
	if d.dir != "" && d.url == "" {
		return " -nats URL"
	}
	return (&natsFlags{url: d.url}).hint()
}

// inUseHint adds to err, when it says that another weir process holds the
// data directory dir (node.ErrDataDirInUse), where the jobs of a weir up
// on dir are reached: the process holding it is most often one, started
// on the URL it noted (servedBy). Other errors are returned as they are.
func inUseHint(err error, dir string) error {
	if dir == "" || !errors.Is(err, node.ErrDataDirInUse) {
		return err
	}
	d := servedBy(dir)
	if d.url == "" {
		// No URL to name: no advice rather than a port it may not be on.
		return err
	}
	return fmt.Errorf("%w; if it is %s, reach its jobs on %s: weir job ls%s", err, d.up, d.url, d.hint())
}
