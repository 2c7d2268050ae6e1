package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Positions records where a mapping and each of its keys' values stand in the
// source. A struct field of this type (tag `yaml:"-"`) is filled by the decoder,
// so validation can point at the exact value it rejects.
type Positions struct {
	Self   Pos
	Values map[string]Pos
	// Key is where the map key stands when the mapping is a value in a map
	// (capabilities.do_x: ...), so a finding about the name can point at it.
	Key Pos
}

// Of returns the position of key's value, or of the mapping itself when the key is absent.
func (p Positions) Of(key string) Pos {
	if v, ok := p.Values[key]; ok {
		return v
	}
	return p.Self
}

// Has reports whether key was written in the source.
func (p Positions) Has(key string) bool {
	_, ok := p.Values[key]
	return ok
}

// Unmarshaler is implemented by types that decode themselves from a node
// (for example a binding that accepts a short string or a mapping).
type Unmarshaler interface {
	UnmarshalStrict(d *Decoder, n *yaml.Node, path string)
}

// Decoder walks yaml.v3 nodes into Go values, recording every problem.
type Decoder struct {
	File  string
	Diags *Diags
}

// NewDecoder returns a decoder that records findings for file into diags.
func NewDecoder(file string, diags *Diags) *Decoder { return &Decoder{File: file, Diags: diags} }

// Pos returns the source position of n.
func (d *Decoder) Pos(n *yaml.Node) Pos {
	if n == nil {
		return Pos{File: d.File}
	}
	return Pos{File: d.File, Line: n.Line, Col: n.Column}
}

// Errorf records an error at n, prefixed with the key path.
func (d *Decoder) Errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	d.Diags.Errorf(d.Pos(n), "%s", msg)
}

// parserProblems are the yaml.v3 parser's messages; it reports their line
// counted from 0, where every other message counts from 1.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

var yamlLine = regexp.MustCompile(`line (\d+)(?:, column (\d+))?`)

// Parse reads one YAML document. Syntax errors become findings with the line
// yaml.v3 reports; an empty file is an error, not an empty configuration.
func Parse(file string, data []byte) (*yaml.Node, Diags) {
	var diags Diags
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		diags.Errorf(Pos{File: file, Line: 1, Col: 1}, "the file is empty")
		return nil, diags
	}
	if err == nil {
		// A second document would be silently ignored by a single Unmarshal.
		var extra yaml.Node
		if err2 := dec.Decode(&extra); err2 == nil {
			diags.Errorf(Pos{File: file, Line: extra.Line, Col: extra.Column}, "the file holds more than one YAML document; physmcpd reads exactly one")
			return nil, diags
		} else if !errors.Is(err2, io.EOF) {
			err = err2
		}
	}
	if err != nil {
		line, col := 1, 1
		m := yamlLine.FindStringSubmatch(err.Error())
		if m != nil {
			line, _ = strconv.Atoi(m[1])
			if m[2] != "" {
				col, _ = strconv.Atoi(m[2])
			}
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		msg = yamlLine.ReplaceAllString(msg, "")
		msg = strings.TrimLeft(msg, ": ")
		if parserProblems[msg] && m != nil {
			line++ // yaml.v3 prints parser (not scanner) error lines 0-based
		}
		diags.Errorf(Pos{File: file, Line: line, Col: col}, "YAML syntax error: %s", msg)
		return nil, diags
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		diags.Errorf(Pos{File: file, Line: 1, Col: 1}, "the file is empty")
		return nil, diags
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		diags.Errorf(Pos{File: file, Line: root.Line, Col: root.Column}, "expected a mapping at the top level, got %s", describe(root))
		return nil, diags
	}
	return root, diags
}

// Decode fills out (a pointer) from n.
func (d *Decoder) Decode(n *yaml.Node, out any, path string) {
	d.value(n, reflect.ValueOf(out).Elem(), path)
}

var (
	positionsType   = reflect.TypeOf(Positions{})
	unmarshalerType = reflect.TypeOf((*Unmarshaler)(nil)).Elem()
)

func (d *Decoder) value(n *yaml.Node, v reflect.Value, path string) {
	n = resolve(n)
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		v.Addr().Interface().(Unmarshaler).UnmarshalStrict(d, n, path)
		return
	}
	if isNull(n) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			return // absent is what a null says; the zero value carries it
		}
		d.Errorf(n, path, "value is empty; expected %s", kindName(v.Type()))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, v.Elem(), path)
	case reflect.Struct:
		d.structValue(n, v, path)
	case reflect.Map:
		d.mapValue(n, v, path)
	case reflect.Slice:
		d.sliceValue(n, v, path)
	case reflect.String:
		if s, ok := d.Scalar(n, path); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		if b, ok := d.Bool(n, path); ok {
			v.SetBool(b)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if i, ok := d.Int(n, path, v.Type().Bits()); ok {
			v.SetInt(i)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if u, ok := d.Uint(n, path, v.Type().Bits()); ok {
			v.SetUint(u)
		}
	case reflect.Float32, reflect.Float64:
		if f, ok := d.Float(n, path); ok {
			v.SetFloat(f)
		}
	case reflect.Interface:
		if d.ambiguousZero(n, path) {
			return
		}
		var x any
		if err := n.Decode(&x); err != nil {
			d.Errorf(n, path, "%v", err)
			return
		}
		if x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		panic(fmt.Sprintf("strictyaml: unsupported field type %s at %s", v.Type(), path))
	}
}

type fieldInfo struct {
	index    int
	required bool
}

func structFields(t reflect.Type) (map[string]fieldInfo, []string, int) {
	fields := map[string]fieldInfo{}
	var names []string
	posIdx := -1
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Type == positionsType {
			posIdx = i
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			continue
		}
		fields[name] = fieldInfo{index: i, required: opts == "required"}
		names = append(names, name)
	}
	return fields, names, posIdx
}

func (d *Decoder) structValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	fields, names, posIdx := structFields(v.Type())
	pos := Positions{Self: d.Pos(n), Values: map[string]Pos{}}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := k.Value
		kp := join(path, key)
		if k.Kind != yaml.ScalarNode {
			d.Errorf(k, path, "keys must be plain names, got %s", describe(k))
			continue
		}
		if key == "<<" {
			d.Errorf(k, path, "merge keys (<<) are not supported; write the keys out")
			continue
		}
		if seen[key] {
			d.Errorf(k, path, "key %q is given twice", key)
			continue
		}
		seen[key] = true
		f, ok := fields[key]
		if !ok {
			d.Errorf(k, path, "unknown key %q%s", key, suggest(key, names))
			continue
		}
		pos.Values[key] = d.Pos(resolve(val))
		if isNull(resolve(val)) {
			// "key:" with nothing after it is a slip, never a way to ask for the default.
			d.Errorf(val, kp, "has no value; give one or remove the key")
			continue
		}
		d.value(val, v.Field(f.index), kp)
	}
	for _, name := range names {
		if fields[name].required && !seen[name] {
			d.Errorf(n, path, "missing required key %q", name)
		}
	}
	if posIdx >= 0 {
		v.Field(posIdx).Set(reflect.ValueOf(pos))
	}
}

// KeyedValue is implemented by map element types that want their map key
// (for example a bus that should know its own name).
type KeyedValue interface{ SetKey(key string) }

func (d *Decoder) mapValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	if v.Type().Key().Kind() != reflect.String {
		panic("strictyaml: only string-keyed maps are supported")
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "<<" {
			d.Errorf(k, path, "keys must be plain names, got %s", describe(k))
			continue
		}
		if seen[k.Value] {
			d.Errorf(k, path, "key %q is given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		if isNull(resolve(val)) {
			d.Errorf(val, join(path, k.Value), "value is empty; expected %s", kindName(v.Type().Elem()))
			continue
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		if elem.Kind() == reflect.Pointer {
			elem.Set(reflect.New(elem.Type().Elem()))
		}
		d.value(val, elem, join(path, k.Value))
		setKeyPos(elem, d.Pos(k))
		if kv, ok := elem.Interface().(KeyedValue); ok {
			kv.SetKey(k.Value)
		} else if elem.CanAddr() {
			if kv, ok := elem.Addr().Interface().(KeyedValue); ok {
				kv.SetKey(k.Value)
			}
		}
		v.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), elem)
	}
}

// setKeyPos records a map key's position in the element's Positions, if it has one.
func setKeyPos(elem reflect.Value, p Pos) {
	for elem.Kind() == reflect.Pointer {
		if elem.IsNil() {
			return
		}
		elem = elem.Elem()
	}
	if elem.Kind() != reflect.Struct || !elem.CanSet() {
		return
	}
	for i := 0; i < elem.NumField(); i++ {
		if elem.Type().Field(i).Type == positionsType {
			pos := elem.Field(i).Addr().Interface().(*Positions)
			pos.Key = p
			return
		}
	}
}

func (d *Decoder) sliceValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.Errorf(n, path, "expected a list, got %s", describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, item := range n.Content {
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		if isNull(resolve(item)) {
			// An empty item is a slip (a stray "-"), never a value to keep.
			d.Errorf(item, itemPath, "list item is empty")
			continue
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(item, elem, itemPath)
		s = reflect.Append(s, elem)
	}
	v.Set(s)
}

// Scalar returns the literal text of a scalar. Numbers and booleans are
// accepted as text (`firmware_version: 1.2` means "1.2"); lists and maps are not.
func (d *Decoder) Scalar(n *yaml.Node, path string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.Errorf(n, path, "expected a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// Bool decodes true or false; yes/no/on/off are rejected because YAML versions disagree on them.
func (d *Decoder) Bool(n *yaml.Node, path string) (bool, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		switch strings.ToLower(n.Value) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	d.Errorf(n, path, "expected true or false, got %s", describe(n))
	return false, false
}

// Int decodes a whole number (decimal, 0x hex, 0o octal or 0b binary) that fits in bits.
func (d *Decoder) Int(n *yaml.Node, path string, bits int) (int64, bool) {
	n = resolve(n)
	if d.ambiguousZero(n, path) {
		return 0, false
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, bits)
		if err == nil {
			return i, true
		}
		if errors.Is(err, strconv.ErrRange) {
			d.Errorf(n, path, "%s does not fit in %d bits", n.Value, bits)
			return 0, false
		}
	}
	d.Errorf(n, path, "expected a whole number, got %s", describe(n))
	return 0, false
}

// Uint decodes a non-negative whole number that fits in bits.
func (d *Decoder) Uint(n *yaml.Node, path string, bits int) (uint64, bool) {
	n = resolve(n)
	if d.ambiguousZero(n, path) {
		return 0, false
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		text := strings.ReplaceAll(n.Value, "_", "")
		if strings.HasPrefix(text, "-") {
			d.Errorf(n, path, "must not be negative, got %s", n.Value)
			return 0, false
		}
		u, err := strconv.ParseUint(strings.TrimPrefix(text, "+"), 0, bits)
		if err == nil {
			return u, true
		}
		if errors.Is(err, strconv.ErrRange) {
			d.Errorf(n, path, "%s is too large (at most %d bits)", n.Value, bits)
			return 0, false
		}
	}
	d.Errorf(n, path, "expected a whole number, got %s", describe(n))
	return 0, false
}

// Float decodes a finite number; NaN and infinities are configuration mistakes.
func (d *Decoder) Float(n *yaml.Node, path string) (float64, bool) {
	n = resolve(n)
	if d.ambiguousZero(n, path) {
		return 0, false
	}
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!float" || n.Tag == "!!int") {
		var f float64
		if err := n.Decode(&f); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true
		}
		if err := n.Decode(&f); err == nil {
			d.Errorf(n, path, "must be a finite number, got %s", n.Value)
			return 0, false
		}
	}
	d.Errorf(n, path, "expected a number, got %s", describe(n))
	return 0, false
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func describe(n *yaml.Node) string {
	n = resolve(n)
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "an empty value"
		case "!!str":
			return strconv.Quote(n.Value)
		case "!!int", "!!float":
			return "number " + n.Value
		case "!!bool":
			return "boolean " + n.Value
		}
		return n.Value
	}
	return "an unexpected node"
}

func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Slice:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "a whole number"
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Closest returns the known name within two edits of key, or "".
func Closest(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if dist := levenshtein(key, k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}

// suggest names the closest known key, to turn a typo into a one-glance fix.
func suggest(key string, known []string) string {
	if best := Closest(key, known); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	sorted := append([]string(nil), known...)
	sort.Strings(sorted)
	return fmt.Sprintf(" (known keys: %s)", strings.Join(sorted, ", "))
}

// Suggest is suggest for callers that check keys themselves.
func Suggest(key string, known []string) string { return suggest(key, known) }

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

var leadingZero = regexp.MustCompile(`^[-+]?0[0-9_]`)

// ambiguousZero rejects numbers such as 010 or 08: yaml.v3 reads the first as
// octal 8 and the second as a float, where a person most likely meant ten and eight.
func (d *Decoder) ambiguousZero(n *yaml.Node, path string) bool {
	if n == nil || n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || !leadingZero.MatchString(n.Value) {
		return false
	}
	d.Errorf(n, path, "number %s has a leading zero, which YAML may read as octal; write it without the zero (or 0o... for octal)", n.Value)
	return true
}

// Describe names what a node holds, for messages ("a list", "number 5", ...).
func Describe(n *yaml.Node) string { return describe(n) }

// SplitMapping divides a mapping's entries in two: those whose key is one of
// keys, and the rest, each as a mapping node standing where n stands. Types
// that decode a few common keys themselves and the rest strictly into a
// kind-specific struct (a bus, a binding, a rule) use it.
func SplitMapping(n *yaml.Node, keys ...string) (picked, rest *yaml.Node) {
	picked = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column}
	rest = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		dst := rest
		if k.Kind == yaml.ScalarNode && slices.Contains(keys, k.Value) {
			dst = picked
		}
		dst.Content = append(dst.Content, k, v)
	}
	return picked, rest
}

// Known returns the keys a struct type decodes (its yaml tags), in field order.
// Documentation and schema tests use it to prove they cover every key.
func Known(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	_, names, _ := structFields(t)
	return names
}

// ErrorAt records an error at a position found earlier (a Positions entry), prefixed with the key path.
func (d *Decoder) ErrorAt(p Pos, path, format string, args ...any) {
	d.Diags.Errorf(p, "%s", prefix(path, fmt.Sprintf(format, args...)))
}

// WarnAt records a warning at p, prefixed with the key path.
func (d *Decoder) WarnAt(p Pos, path, format string, args ...any) {
	d.Diags.Warnf(p, "%s", prefix(path, fmt.Sprintf(format, args...)))
}

func prefix(path, msg string) string {
	if path == "" {
		return msg
	}
	return path + ": " + msg
}

// SuggestAmong is Suggest for names that are not keys (buses, windows,
// tools): it names the closest one, or lists them all as noun.
func SuggestAmong(name string, known []string, noun string) string {
	if best := Closest(name, known); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	sorted := append([]string(nil), known...)
	sort.Strings(sorted)
	return fmt.Sprintf(" (%s: %s)", noun, strings.Join(sorted, ", "))
}
