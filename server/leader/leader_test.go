package leader

import (
	"strings"
	"testing"
	"time"
)

func valid() Config {
	return Config{Namespace: "ns", Name: "lease", Identity: "pod-a",
		Lease: DefaultLease, Renew: DefaultRenew, Retry: DefaultRetry,
		StepBound: 4 * time.Second, StepFlag: "--libvirt-call-timeout"}
}

func TestValidate(t *testing.T) {
	if err := valid().Validate(); err != nil {
		t.Fatalf("chart defaults refused: %v", err)
	}
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"renew not shorter than lease": {func(c *Config) { c.Renew = c.Lease }, "--leader-elect-renew 15s must be shorter than --leader-elect-lease"},
		"retry not shorter than renew": {func(c *Config) { c.Retry = c.Renew }, "--leader-elect-retry"},
		"call bound past the margin":   {func(c *Config) { c.StepBound = 30 * time.Second }, "--libvirt-call-timeout 30s does not fit"},
		"call bound leaves no exit":    {func(c *Config) { c.StepBound = 5 * time.Second }, "--libvirt-call-timeout 5s does not fit"},
		"zero lease":                   {func(c *Config) { c.Lease = 0 }, "must be positive"},
		"no identity":                  {func(c *Config) { c.Identity = "" }, "POD_NAME"},
		"no name":                      {func(c *Config) { c.Name = "" }, "--leader-elect-lease-name"},
		"margin under two retries":     {func(c *Config) { c.Retry = 3 * time.Second; c.StepBound = time.Second }, "shorter than 2 × --leader-elect-retry 3s"},
	} {
		c := valid()
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", name, err, tc.want)
		}
	}
}

func TestShortLease(t *testing.T) {
	c := valid()
	c.Lease, c.Renew, c.Retry, c.StepBound = 4*time.Second, 3*time.Second, 500*time.Millisecond, 500*time.Millisecond
	if err := c.Validate(); err != nil {
		t.Fatalf("short lease refused: %v", err)
	}
}
