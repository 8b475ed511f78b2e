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

# The test command CI runs (.ci/run).
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

clean:
	rm -rf bin testagents/bin example/postoffice
