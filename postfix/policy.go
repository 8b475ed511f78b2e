package postfix

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"time"
)

// policyServer is a Postfix policy service (SMTPD_POLICY_README) that
// answers every request "DUNNO" after a delay: smtpd asks it at each RCPT,
// so it slows the server down per recipient, like the README experiment's
// "sleep 1" restriction but with a finer unit.
type policyServer struct {
	ln    net.Listener
	delay time.Duration
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func startPolicy(delay time.Duration) (*policyServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("postfix: policy service: %w", err)
	}
	p := &policyServer{ln: ln, delay: delay, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns[c] = true
			p.mu.Unlock()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c)
				p.mu.Lock()
				delete(p.conns, c)
				p.mu.Unlock()
				c.Close()
			}()
		}
	}()
	return p, nil
}

func (p *policyServer) addr() string { return p.ln.Addr().String() }

// serve answers requests on one connection: attribute lines, then an empty
// line; smtpd keeps the connection for further requests.
func (p *policyServer) serve(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if line != "\n" {
			continue
		}
		time.Sleep(p.delay) // the service time being simulated
		if _, err := c.Write([]byte("action=DUNNO\n\n")); err != nil {
			return
		}
	}
}

// close stops the service; a nil service is fine.
func (p *policyServer) close() {
	if p == nil {
		return
	}
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
