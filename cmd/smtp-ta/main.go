// Command smtp-ta is zsched's SMTP transport agent: it takes jobs from the
// scheduler over ZMailer's agent protocol (package ta) and delivers each
// message's recipients to the destination's mail servers, one SMTP
// transaction per message and job. Its command line is ZMailer's smtp's:
//
//	smtp-ta [-c channel] [-h heloname] [-p port] [-F host[:port]] [-x]
//	        [-l logfile] [-routes file] [-tls none|may|encrypt|verify]
//	        [-maxrcpt n] [-noop interval] [-timeout d] [-connect-timeout d]
//	        [host]
//
// -c selects the r lines to deliver (default smtp); a host argument makes
// the agent host-bound (job lines carry no host). -F sends everything to
// one server ("[127.0.0.1]:2525": brackets mean no MX lookup), -x looks up
// A/AAAA records only, -routes reads a static route map (see
// smtpclient.Routes), else MX records are used with A/AAAA fallback. TLS is
// opportunistic by default; -tls and the route map's tls= option set the
// policy. -l appends the agent's log (one line per transaction and
// connection) to a file; without it the agent logs nothing, since its
// stderr is the scheduler's report stream.
//
// The agent keeps its SMTP session between jobs: the next job reuses it
// when it goes to the same destination, or to another routed to the same
// fixed next hop (-F, a route, an address literal: a smarthost, or one
// server for many domains); otherwise QUIT and a new session. An idle
// session gets a NOOP every -noop interval. Run it with GOMAXPROCS=1 in
// the clause's command: one job at a time needs one P, and more only add
// idle threads the runtime wakes.
//
// Outcomes, per recipient: 2xx → ok (ok2 with a success d line for
// NOTIFY=SUCCESS to a server without DSN; ok3 when the server took that
// duty), 5xx → error2 with a d line, 4xx → deferred (deferback after the
// final dot), and every 421, connection, DNS, greeting or TLS failure →
// deferall for all recipients it leaves unsettled: a site failure for the
// scheduler's concurrency feedback.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/smtpclient"
	"zsched/ta"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		// stderr is the scheduler's report stream: a '#' line is logged
		// there, not taken for a malformed report.
		fmt.Fprintf(os.Stderr, "# smtp-ta: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("smtp-ta", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	helo := fs.String("h", "", "HELO/EHLO name (default: the host name)")
	port := fs.Int("p", 25, "SMTP port")
	forced := fs.String("F", "", "forced destination host[:port] for every job; [host] skips the MX lookup")
	noMX := fs.Bool("x", false, "no MX lookups: connect to the destination's A/AAAA addresses")
	logPath := fs.String("l", "", "append the agent's log to this file")
	routesPath := fs.String("routes", "", "static route map file")
	tlsPolicy := fs.String("tls", "may", "TLS policy: none, may, encrypt or verify")
	caFile := fs.String("tls-ca", "", "PEM file of CA certificates for -tls verify (default: the system's)")
	maxRcpt := fs.Int("maxrcpt", 100, "recipients per SMTP transaction")
	noop := fs.Duration("noop", 3*time.Minute, "NOOP interval on an idle session (0: none)")
	timeout := fs.Duration("timeout", 5*time.Minute, "timeout for each SMTP command's reply")
	connTimeout := fs.Duration("connect-timeout", 30*time.Second, "TCP connect timeout")
	a, err := ta.ParseFlags(fs, args, "smtp")
	if err != nil {
		return err
	}
	if *maxRcpt < 1 {
		return fmt.Errorf("%w: -maxrcpt %d: want at least 1", ta.ErrUsage, *maxRcpt)
	}
	policy, err := smtpclient.ParseTLSPolicy(*tlsPolicy)
	if err != nil {
		return err
	}
	name := *helo
	if name == "" {
		if name, err = os.Hostname(); err != nil || name == "" {
			name = "localhost"
		}
	}
	log := hclog.NewNullLogger()
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		log = hclog.New(&hclog.LoggerOptions{Name: fmt.Sprintf("smtp-ta[%d]", os.Getpid()), Output: f, Level: hclog.Debug})
	}
	ag := &agent{
		dir: a.Dir, port: *port, noMX: *noMX, tls: policy, maxRcpt: *maxRcpt, noop: *noop,
		resolver: net.DefaultResolver, log: log,
		opts: smtpclient.Options{HeloName: name, DialTimeout: *connTimeout, CommandTimeout: *timeout,
			GreetingTimeout: *timeout, DataTimeout: 2 * *timeout},
	}
	if *forced != "" {
		nh, err := smtpclient.ParseNexthop(*forced, *port)
		if err != nil {
			return err
		}
		ag.forced = &nh
	}
	if *routesPath != "" {
		if ag.routes, err = smtpclient.LoadRoutes(*routesPath, *port); err != nil {
			return err
		}
	}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no certificates", *caFile)
		}
		ag.opts.TLSConfig = &tls.Config{RootCAs: pool}
	}
	log.Info("started", "channel", a.Channel, "host", a.Host, "forced", *forced, "tls", policy.String())
	defer ag.close()
	return a.Serve(ag.deliver)
}
