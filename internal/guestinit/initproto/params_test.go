package initproto

import (
	"testing"
)

func TestParamsRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []Params{
		DefaultParams(),
		{Root: "serial:r", RootFSType: "erofs", Port: "p", CtlPort: "c"},
		{Root: "serial:r", Harness: "serial:engrams-harness", Port: "p"},
	}
	for _, p := range tests {
		cmdline := "console=ttyS0 quiet "
		for _, w := range p.KernelArgs() {
			cmdline += w + " "
		}
		got, err := ParseCmdline(cmdline)
		if err != nil || got != p {
			t.Errorf("round trip of %+v = %+v, %v", p, got, err)
		}
	}
	if _, err := ParseCmdline("engrams.bogus=1"); err == nil {
		t.Error("unknown key: want an error")
	}
	if p, _ := ParseCmdline("quiet"); p.Port != DefaultPort {
		t.Errorf("default port = %q", p.Port)
	}
}
