# Two commands do all set-up (README): `make demo` and `make test`.
GO ?= go

.PHONY: all build demo test bench clean

all: build

build:
	$(GO) build -o bin/scheduler ./cmd/scheduler
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

clean:
	rm -rf bin testagents/bin example/postoffice
