package ta

import (
	"errors"
	"flag"
	"fmt"
)

// ErrUsage is wrapped by ParseFlags' errors about the command line.
var ErrUsage = errors.New("ta: usage")

// ParseFlags reads an agent's command line the way ZMailer's agents take
// it: "-c channel", then optionally the destination host as the last
// argument (the clause's standalone $host, which makes the agent
// host-bound). Register the agent's own flags on fs before calling; fs's
// name becomes the agent's Name. defaultChannel is the channel when -c is
// absent; "" makes -c required.
func ParseFlags(fs *flag.FlagSet, args []string, defaultChannel string) (*Agent, error) {
	channel := fs.String("c", defaultChannel, "channel of the r lines to deliver")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	a := &Agent{Channel: *channel, Name: fs.Name()}
	switch fs.NArg() {
	case 0:
	case 1:
		a.Host = fs.Arg(0)
	default:
		return nil, fmt.Errorf("%w: %s [flags] [host]: extra arguments %q", ErrUsage, fs.Name(), fs.Args()[1:])
	}
	if a.Channel == "" {
		return nil, fmt.Errorf("%w: %s: -c channel is required", ErrUsage, fs.Name())
	}
	return a, nil
}
