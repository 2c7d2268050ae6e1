package manifest

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

var rateGrammar = regexp.MustCompile(`^\s*([0-9]+)\s*/\s*(second|minute|hour|day)\s*$`)

var ratePeriods = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
}

// ParseRate reads the rate grammar N/second|minute|hour|day with N ≥ 1.
func ParseRate(text string) (Rate, error) {
	m := rateGrammar.FindStringSubmatch(text)
	if m == nil {
		return Rate{}, fmt.Errorf("rate %q is not of the form N/second, N/minute, N/hour or N/day", text)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 {
		return Rate{}, fmt.Errorf("rate %q: the count must be a whole number of at least 1", text)
	}
	return Rate{Count: n, Per: ratePeriods[m[2]], Text: text}, nil
}

func (r Rate) String() string { return r.Text }

// UnmarshalStrict decodes a rate written as a string.
func (r *Rate) UnmarshalStrict(d *strictyaml.Decoder, n *yaml.Node, path string) {
	text, ok := d.Scalar(n, path)
	if !ok {
		return
	}
	parsed, err := ParseRate(text)
	if err != nil {
		d.Errorf(n, path, "%v", err)
		return
	}
	parsed.Source = d.Pos(n)
	*r = parsed
}
