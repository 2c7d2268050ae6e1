package manifest

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/internal/docsync"
	"github.com/physmcp/physmcpd/internal/strictyaml"
)

// decoderKeys is every object the manifest decoder reads, with its keys.
// Schema definitions of bus and binding kinds also list the common keys,
// because a schema object must name all the keys it allows.
func decoderKeys() (docs, schema map[string][]string) {
	known := strictyaml.Known
	docs = map[string][]string{}
	for _, v := range []any{Manifest{}, Device{}, Location{}, Coordinates{}, Network{}, Protocol{}, Mesh{}, Audit{}, RemoteSink{}, Telemetry{}, TelemetryMQTT{}, SafeState{},
		BusSim{}, I2CBus{}, GPIOBus{}, ModbusTCPBus{}, ModbusRTUBus{}, MCPBus{}, Adopt{}, RS485{}, RS485Line{}, Capability{}, Range{}, PointSim{}, Waveform{}, Interlock{},
		Operation{}, Ramp{}, Run{}, Move{}, Step{}, StepCall{}} {
		t := reflect.TypeOf(v)
		docs[t.Name()] = known(t)
	}
	busCommonKeys := known(reflect.TypeFor[busCommon]())
	bindingCommonKeys := append(known(reflect.TypeFor[bindingCommon]()), "address")
	docs["Bus"] = busCommonKeys
	docs["Binding"] = bindingCommonKeys
	docs["I2CBinding"] = known(bindingKeyTypes[kindI2C])
	docs["GPIOBinding"] = known(bindingKeyTypes[kindGPIO])
	docs["ModbusBinding"] = known(bindingKeyTypes[kindModbus])
	docs["VirtualBinding"] = known(reflect.TypeFor[VirtualBinding]())

	schema = map[string][]string{}
	for name, k := range docs {
		schema[name] = k
	}
	schema[""] = docs["Manifest"]
	delete(schema, "Manifest")
	delete(schema, "Bus")
	delete(schema, "Binding")
	for _, name := range []string{"I2CBus", "GPIOBus", "ModbusTCPBus", "ModbusRTUBus", "MCPBus"} {
		schema[name] = slices.Concat(busCommonKeys, docs[name])
	}
	for _, name := range []string{"I2CBinding", "GPIOBinding", "ModbusBinding"} {
		schema[name] = slices.Concat(bindingCommonKeys, docs[name])
	}
	// a virtual binding has no short address
	schema["VirtualBinding"] = slices.Concat(known(reflect.TypeFor[bindingCommon]()), docs["VirtualBinding"])
	for name, k := range docs {
		docs[name] = sorted(k)
	}
	for name, k := range schema {
		schema[name] = sorted(k)
	}
	return docs, schema
}

func sorted(k []string) []string {
	k = slices.Clone(k)
	slices.Sort(k)
	return slices.Compact(k)
}

// TestSchemaAndDocsCoverDecoder fails when a key is added to (or removed
// from) the decoder without the JSON Schema and docs/manifest.md following.
func TestSchemaAndDocsCoverDecoder(t *testing.T) {
	wantDocs, wantSchema := decoderKeys()
	text := docsync.Check(t, "../schema/physmcp.manifest.schema.json", "../docs/manifest.md", wantSchema, wantDocs)
	for kind, aliases := range shortAliases {
		for alias := range aliases {
			if !strings.Contains(text, "`"+alias+"`") {
				t.Errorf("docs/manifest.md does not mention the %s short alias %q", kind, alias)
			}
		}
	}
}
