package kvbucket

import (
	"context"
	"time"

	"github.com/edgelimit/edgelimit"
)

var _ edgelimit.UsageReader = (*Bucket)(nil)

// Usage reads req's key's usage for an operator (Engine.Usage): what the
// bucket has left at the request's instant (a Peek of one token, without
// the grant) and what this region's grant has left and until when; their
// sum is Remaining, what the key's next requests of one token each can
// spend at that instant (the bucket first, then the grant). A process that
// does not know the key reads it strongly consistent; what other
// processes spent shows once they wrote it (within one sync interval of
// the key going idle, see the package documentation).
func (b *Bucket) Usage(ctx context.Context, req edgelimit.Request) (edgelimit.Usage, error) {
	now := b.instant(req)
	one := req
	one.Cost = 1
	d, own, grants, err := b.peekBucket(ctx, now, one)
	if err != nil {
		return edgelimit.Usage{}, err
	}
	u := edgelimit.Usage{Decision: d, Quota: d.Remaining}
	if n := now.UnixNano(); grants && own.GrantUntil > n && own.GrantLeft > 0 {
		u.Grant = edgelimit.Grant{Units: own.GrantLeft, Until: time.Unix(0, own.GrantUntil).UTC()}
	}
	u.Remaining = u.Quota + u.Grant.Units
	if !u.Allowed && u.Grant.Units > 0 {
		u.Allowed, u.RetryAfter = true, 0
	}
	return u, nil
}
