package smtpclient

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer is a scriptable SMTP server on 127.0.0.1 for the client's
// unit tests: the real-server tests (Postfix) live with the agent.
type fakeServer struct {
	t        *testing.T
	ln       net.Listener
	greeting string   // default "220 fake.test ESMTP"
	ext      []string // EHLO keywords after the first line
	cert     *tls.Certificate
	// reply answers a command; "" means the default for it.
	reply func(cmd string) string

	mu       sync.Mutex
	log      []string // "C: ..." and "S: ..." lines, all sessions
	sessions int
	batched  []string // commands that arrived while more input was already buffered
	messages []string // the DATA contents, dot-unstuffed, CRLF
	wg       sync.WaitGroup
}

func newFakeServer(t *testing.T, ext ...string) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{t: t, ln: ln, greeting: "220 fake.test ESMTP", ext: ext}
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

// start begins accepting; call it after setting the fields.
func (s *fakeServer) start() *fakeServer {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				s.serve(c)
			}()
		}
	}()
	return s
}

func (s *fakeServer) target() Target {
	return Target{Name: "[127.0.0.1]", Addr: s.ln.Addr().String()}
}

func (s *fakeServer) record(line string) {
	s.mu.Lock()
	s.log = append(s.log, line)
	s.mu.Unlock()
}

// commands returns the client's commands seen so far, in order.
// batchedCmds is a copy of batched.
func (s *fakeServer) batchedCmds() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batched)
}

func (s *fakeServer) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.log {
		if c, ok := strings.CutPrefix(l, "C: "); ok {
			out = append(out, c)
		}
	}
	return out
}

func (s *fakeServer) serve(c net.Conn) {
	s.mu.Lock()
	s.sessions++
	s.mu.Unlock()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	send := func(lines ...string) bool {
		for _, l := range lines {
			s.record("S: " + l)
			w.WriteString(l + "\r\n")
		}
		return w.Flush() == nil
	}
	if !send(s.greeting) || !strings.HasPrefix(s.greeting, "220") {
		return
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.TrimRight(line, "\r\n")
		s.record("C: " + cmd)
		if r.Buffered() > 0 {
			s.mu.Lock()
			s.batched = append(s.batched, cmd)
			s.mu.Unlock()
		}
		verb := strings.ToUpper(strings.Fields(cmd + " x")[0])
		var rep string
		if s.reply != nil {
			rep = s.reply(cmd)
		}
		if rep == "" {
			switch verb {
			case "EHLO":
				lines := []string{"250-fake.test"}
				for _, e := range s.ext {
					lines = append(lines, "250-"+e)
				}
				lines[len(lines)-1] = "250 " + strings.TrimPrefix(lines[len(lines)-1], "250-")
				if !send(lines...) {
					return
				}
				continue
			case "DATA":
				rep = "354 go ahead"
			case "QUIT":
				send("221 2.0.0 bye")
				return
			case "STARTTLS":
				rep = "220 2.0.0 ready"
			default:
				rep = "250 2.0.0 ok"
			}
		}
		if !send(rep) {
			return
		}
		switch {
		case strings.HasPrefix(rep, "421"):
			return
		case verb == "STARTTLS" && strings.HasPrefix(rep, "220"):
			if s.cert == nil {
				c.Write([]byte("this is not TLS\r\n"))
				return
			}
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*s.cert}})
			if tc.Handshake() != nil {
				return
			}
			c, r, w = tc, bufio.NewReader(tc), bufio.NewWriter(tc)
			s.record("S: (TLS)")
		case verb == "DATA" && strings.HasPrefix(rep, "354"):
			var msg strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				msg.WriteString(strings.TrimPrefix(l, "."))
			}
			s.mu.Lock()
			s.messages = append(s.messages, msg.String())
			s.mu.Unlock()
			rep := "250 2.0.0 queued"
			if s.reply != nil {
				if x := s.reply("."); x != "" {
					rep = x
				}
			}
			s.record("C: .")
			if !send(rep) || strings.HasPrefix(rep, "421") {
				return
			}
		}
	}
}

// selfSigned makes a certificate for 127.0.0.1 and "fake.test", and a
// pool that trusts it.
func selfSigned(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "fake.test"},
		DNSNames:     []string{"fake.test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
