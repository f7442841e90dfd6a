package policyopts_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/policyopts"
	"github.com/edgelimit/edgelimit/policy"
)

type mine struct{ N int }
type theirs struct{}

var errConfig = errors.New("mine: invalid config")

func TestOf(t *testing.T) {
	p := &policy.Policy{Name: "p", Options: &mine{N: 2}}
	if o, err := policyopts.Of(&mine{N: 1}, p, errConfig, "mine"); err != nil || o.N != 1 {
		t.Errorf("explicit options: %v, %v; want them, not the policy's", o, err)
	}
	if o, err := policyopts.Of[mine](nil, p, errConfig, "mine"); err != nil || o.N != 2 {
		t.Errorf("the policy's options: %v, %v", o, err)
	}
	if o, err := policyopts.Of[mine](nil, &policy.Policy{Name: "p"}, errConfig, "mine"); err != nil || o.N != 0 {
		t.Errorf("no options: %v, %v; want the zero value (the defaults)", o, err)
	}
	other := &policy.Policy{Name: "p", Options: &theirs{}}
	_, err := policyopts.Of[mine](nil, other, errConfig, "mine")
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), "*policyopts_test.theirs, not *policyopts_test.mine") {
		t.Errorf("another strategy's options: %v; want errConfig naming both types", err)
	}
	if _, err := policyopts.Of[mine](nil, other, nil, "mine"); err == nil || !strings.HasPrefix(err.Error(), "mine: policy \"p\"") {
		t.Errorf("without errConfig: %v; want the prefix", err)
	}
}
