package lab

import (
	"context"
	"os"
	"testing"
)

func TestScratchCeiling(t *testing.T) {
	rows, err := RunCeiling(context.Background(), "sim", Experiments("sim"), "", nil)
	WriteCeilingTable(os.Stdout, rows)
	if err != nil {
		t.Fatal(err)
	}
}
