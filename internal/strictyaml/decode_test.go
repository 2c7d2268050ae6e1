package strictyaml

import (
	"strings"
	"testing"
)

type inner struct {
	Name string `yaml:"name,required"`

	At Positions `yaml:"-"`
}

type doc struct {
	Count int               `yaml:"count"`
	Ratio float64           `yaml:"ratio"`
	Items []*inner          `yaml:"items"`
	Named map[string]*inner `yaml:"named"`
	Any   any               `yaml:"any"`

	At Positions `yaml:"-"`
}

func decode(t *testing.T, text string) (*doc, Diags) {
	t.Helper()
	root, diags := Parse("f.yml", []byte(text))
	if root == nil {
		return nil, diags
	}
	var d doc
	NewDecoder("f.yml", &diags).Decode(root, &d, "")
	return &d, diags
}

func TestFindings(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"count: 1\n---\ncount: 2\n", "f.yml:2:1: the file holds more than one YAML document"},
		{"", "f.yml:1:1: the file is empty"},
		{"count: 1\nitems: [\nname: 2\n", "f.yml:2:1: YAML syntax error: did not find expected ',' or ']'"},
		{"count: 1\n  ratio: 2\n", "f.yml:2:1: YAML syntax error: mapping values are not allowed in this context"},
		{"count: 010\n", "f.yml:1:8: count: number 010 has a leading zero"},
		{"ratio: 08\n", "f.yml:1:8: ratio: number 08 has a leading zero"},
		{"any: 0010\n", "f.yml:1:6: any: number 0010 has a leading zero"},
		{"items:\n  -\n  - name: a\n", "f.yml:2:4: items[0]: list item is empty"},
		{"named:\n  a:\n", "f.yml:2:5: named.a: value is empty; expected a mapping"},
		{"count:\n", "f.yml:1:7: count: has no value"},
		{"items: [{name: }]\n", "f.yml:1:16: items[0].name: has no value"},
		{"any:\n", "f.yml:1:5: any: has no value"},
		{"items: [{}]\n", `f.yml:1:9: items[0]: missing required key "name"`},
		{"cout: 1\n", `f.yml:1:1: unknown key "cout" (did you mean "count"?)`},
		{"count: 1\ncount: 2\n", `f.yml:2:1: key "count" is given twice`},
		{"count: yes\n", "f.yml:1:8: count: expected a whole number, got \"yes\""},
	} {
		_, diags := decode(t, tc.text)
		if !strings.Contains(diags.String(), tc.want) {
			t.Errorf("%q: want %q, got:\n%s", tc.text, tc.want, diags)
		}
	}
}

func TestEmptyItemsAreDropped(t *testing.T) {
	d, _ := decode(t, "items:\n  -\n  - name: a\n")
	if len(d.Items) != 1 || d.Items[0] == nil || d.Items[0].Name != "a" {
		t.Errorf("items: %+v", d.Items)
	}
}

func TestKeyPositions(t *testing.T) {
	d, diags := decode(t, "named:\n  first:\n    name: a\n  second: {name: b}\n")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if k := d.Named["second"].At.Key; k.Line != 4 || k.Col != 3 {
		t.Errorf("key position %v", k)
	}
	if s := d.Named["first"].At.Self; s.Line != 3 || s.Col != 5 {
		t.Errorf("value position %v", s)
	}
}

func TestSplitMapping(t *testing.T) {
	root, _ := Parse("f.yml", []byte("a: 1\nb: 2\nc: 3\n"))
	picked, rest := SplitMapping(root, "a", "c")
	if len(picked.Content) != 4 || picked.Content[2].Value != "c" || len(rest.Content) != 2 || rest.Content[0].Value != "b" {
		t.Errorf("picked %d, rest %d", len(picked.Content), len(rest.Content))
	}
}

func TestSuggestAmong(t *testing.T) {
	if got := SuggestAmong("i2c0", []string{"i2c1", "rs485"}, "buses"); got != ` (did you mean "i2c1"?)` {
		t.Error(got)
	}
	if got := SuggestAmong("xyz", []string{"rs485", "gpio"}, "buses"); got != " (buses: gpio, rs485)" {
		t.Error(got)
	}
}
