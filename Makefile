# Two commands do all set-up (README): `make demo` and `make test`.
GO ?= go
PREFIX ?= /usr/local
# `scheduler version` shows them; the commit comes from Go's VCS stamp when
# there is one (not in a git worktree), else from here.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS = -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build demo test bench clean install

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/scheduler ./cmd/scheduler
	$(GO) build -o testagents/bin/ ./testagents/...

# Build, lay the shipped example queue into example/postoffice, and drain it
# with the test agents, printing the scheduler's log.
demo: build
	rm -rf example/postoffice
	cp -R example/seed example/postoffice
	./bin/scheduler check scheduler.toml
	./bin/scheduler run -config scheduler.toml -drain
	@echo "--- quarantined (malformed input is moved aside, never deleted):"
	@ls -l example/postoffice/bad

# The test command, exactly what CI runs: gofmt check, go vet, go test -race,
# a short run of every fuzz target. Installs Debian's postfix package when it
# is missing (the SMTP agent is tested against private Postfix instances).
test:
	bash .ci/run

# The program as $(PREFIX)/bin/zsched, with scheduler (ZMailer's name, which
# the README uses) a link to it, and the systemd unit (deploy/zsched.service).
# On a host that runs ZMailer's own scheduler, remove the link.
install: build
	install -D -m 0755 bin/scheduler $(DESTDIR)$(PREFIX)/bin/zsched
	ln -sf zsched $(DESTDIR)$(PREFIX)/bin/scheduler
	install -D -m 0644 deploy/zsched.service $(DESTDIR)/etc/systemd/system/zsched.service
	install -d -m 0755 $(DESTDIR)/etc/zsched

# The drain benchmark (README, Speed and memory): bin/bench times bin/scheduler
# with testagents/bin/sink; BENCH passes flags, e.g. BENCH="-messages 100000".
bench: build
	$(GO) build -o bin/bench ./cmd/bench
	./bin/bench $(BENCH)

clean:
	rm -rf bin testagents/bin example/postoffice
