package mcpserver

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestLineLimiterEndsOverlongMessages(t *testing.T) {
	ok := strings.Repeat("x", 10) + "\n" + strings.Repeat("y", 10) + "\n"
	if b, err := io.ReadAll(&lineLimiter{r: strings.NewReader(ok), max: 10}); err != nil || string(b) != ok {
		t.Errorf("lines at the limit: %q, %v", b, err)
	}
	long := "short\n" + strings.Repeat("z", 11) + "\n"
	if _, err := io.ReadAll(&lineLimiter{r: strings.NewReader(long), max: 10}); !errors.Is(err, ErrMessageTooLong) {
		t.Errorf("a line over the limit: %v", err)
	}
}
