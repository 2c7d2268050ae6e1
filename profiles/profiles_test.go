package profiles

import (
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/manifest"
)

func device(profile string, kinds ...manifest.Kind) *manifest.Manifest {
	m := &manifest.Manifest{File: "m.yml", Profile: profile}
	for i, k := range kinds {
		m.Capabilities = append(m.Capabilities, &manifest.Capability{Name: string(rune('a' + i)), Kind: k})
	}
	return m
}

func TestLiteHidesDoCapabilities(t *testing.T) {
	m := device("", manifest.KindRead, manifest.KindDo, manifest.KindRead)
	served, hidden, err := Lite.Apply(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(served.Capabilities) != 2 || served.Capabilities[0].Kind != manifest.KindRead || served.Capabilities[1].Kind != manifest.KindRead {
		t.Errorf("lite serves %v", served.Capabilities)
	}
	if len(hidden) != 1 || hidden[0] != "do_b" {
		t.Errorf("hidden %v, want [do_b]", hidden)
	}
	if len(m.Capabilities) != 3 {
		t.Error("Apply changed the manifest it was given")
	}
	full, hidden, err := Full.Apply(m)
	if err != nil || full != m || hidden != nil {
		t.Errorf("full: %v %v %v", full, hidden, err)
	}
}

func TestLiteBoundsTheManifest(t *testing.T) {
	kinds := make([]manifest.Kind, Lite.MaxCapabilities+1)
	for i := range kinds {
		kinds[i] = manifest.KindRead
	}
	if _, _, err := Lite.Apply(device("", kinds...)); err == nil || !strings.Contains(err.Error(), "at most 128 capabilities; m.yml declares 129") {
		t.Errorf("oversized manifest: %v", err)
	}
}

func TestTransports(t *testing.T) {
	if err := Lite.CheckTransport(HTTP); err == nil || err.Error() != "the lite profile does not serve http (it serves stdio, serial)" {
		t.Errorf("lite over http: %v", err)
	}
	for _, tr := range []Transport{Stdio, Serial} {
		if err := Lite.CheckTransport(tr); err != nil {
			t.Errorf("lite over %s: %v", tr, err)
		}
	}
	for _, tr := range []Transport{Stdio, Serial, HTTP} {
		if !Full.Allows(tr) {
			t.Errorf("full does not serve %s", tr)
		}
	}
	if Lite.DoTools || Lite.DiskWrites || Lite.Workers == 0 || Lite.MaxMessageBytes == 0 || Lite.GCPercent == 0 {
		t.Errorf("lite is not bounded read-only telemetry: %+v", Lite)
	}
}
