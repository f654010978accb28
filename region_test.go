package outbox

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRegionSlices(t *testing.T) {
	c := Config{BucketCount: 12, Regions: []string{"us-east-1", "eu-west-1", "ap-south-1"}}
	if err := c.CheckRegions(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		region string
		lo, hi int
	}{{"us-east-1", 0, 4}, {"eu-west-1", 4, 8}, {"ap-south-1", 8, 12}} {
		lo, hi, ok := c.RegionBuckets(tc.region)
		if !ok || lo != tc.lo || hi != tc.hi {
			t.Errorf("RegionBuckets(%s) = %d, %d, %v; want %d, %d", tc.region, lo, hi, ok, tc.lo, tc.hi)
		}
		for b := tc.lo; b < tc.hi; b++ {
			if got := c.RegionOf(b); got != tc.region {
				t.Errorf("RegionOf(%d) = %q, want %q", b, got, tc.region)
			}
		}
		if got := c.Drains(tc.region); !slices.Equal(got, []int{tc.lo, tc.lo + 1, tc.lo + 2, tc.lo + 3}) {
			t.Errorf("Drains(%s) = %v", tc.region, got)
		}
	}
	c.TakenOver = map[string]string{"us-east-1": "eu-west-1"}
	if err := c.CheckRegions(); err != nil {
		t.Fatal(err)
	}
	if got := c.Drains("eu-west-1"); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("after a takeover, Drains(eu-west-1) = %v", got)
	}
	if got := c.Drains("us-east-1"); len(got) != 0 {
		t.Errorf("a region taken over drains %v, want nothing", got)
	}
	if got := (Config{BucketCount: 3}).Drains(""); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("default mode: Drains = %v, want every bucket", got)
	}
}

func TestCheckRegionsRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"uneven", Config{BucketCount: 8, Regions: []string{"a", "b", "c"}}, "multiple"},
		{"twice", Config{BucketCount: 8, Regions: []string{"a", "a"}}, "twice"},
		{"bad id", Config{BucketCount: 8, Regions: []string{"a", "B_1"}}, "a-z"},
		{"unknown taker", Config{BucketCount: 8, Regions: []string{"a", "b"}, TakenOver: map[string]string{"a": "c"}}, "not in"},
		{"self", Config{BucketCount: 8, Regions: []string{"a", "b"}, TakenOver: map[string]string{"a": "a"}}, "itself"},
		{"chain", Config{BucketCount: 8, Regions: []string{"a", "b", "c", "d"}, TakenOver: map[string]string{"a": "b", "b": "c"}}, "itself taken over"},
		{"takeover without regions", Config{BucketCount: 8, TakenOver: map[string]string{"a": "b"}}, "without regions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.c.CheckRegions(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckRegions = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestCheckRegion(t *testing.T) {
	region := Config{BucketCount: 8, Regions: []string{"a", "b"}}
	for _, tc := range []struct {
		name   string
		stored Config
		local  string
		ok     bool
	}{
		{"default mode, no region", Config{BucketCount: 8}, "", true},
		{"region mode, listed", region, "b", true},
		{"region mode, none", region, "", false},
		{"region mode, unlisted", region, "c", false},
		{"default mode, a region", Config{BucketCount: 8}, "a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRegion(tc.stored, tc.local)
			var me *MisconfigurationError
			switch {
			case tc.ok && err != nil:
				t.Errorf("CheckRegion = %v, want nil", err)
			case !tc.ok && (!errors.As(err, &me) || me.Setting != "Region" || me.Fix == ""):
				t.Errorf("CheckRegion = %v, want a *MisconfigurationError for Region with a fix", err)
			}
		})
	}
}
