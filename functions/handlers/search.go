package handlers

import (
	"context"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/middleware"
)

// SearchConfig configures NewSearch.
type SearchConfig struct {
	// Records is the number of products in the corpus; default
	// DefaultSearchRecords. The scan's cost grows linearly with it.
	Records int
	// Seed chooses the corpus; default 1. The same seed gives the same
	// corpus on every instance.
	Seed uint64
}

// DefaultSearchRecords is SearchConfig.Records's default: about 1.6 MB of
// text, a scan of a few milliseconds on one Lambda vCPU.
const DefaultSearchRecords = 10_000

// Limits of a search request.
const (
	MinSearchQuery     = 2
	MaxSearchQuery     = 64
	DefaultSearchLimit = 10
	MaxSearchLimit     = 50
)

// SearchResult is one matching product.
type SearchResult struct {
	ID         int    `json:"id"`
	Title      string `json:"title"`
	PriceCents int    `json:"price_cents"`
}

// SearchResponse is the body of GET /search.
type SearchResponse struct {
	Query   string         `json:"query"`
	Scanned int            `json:"scanned"`
	Matches int            `json:"matches"`
	Results []SearchResult `json:"results"`
	Quota   []Quota        `json:"quota,omitempty"`
}

// Corpus is the in-memory product table the search scans.
type Corpus struct {
	// text holds every record's searchable text, lower case ASCII, one
	// after the other; ends[i] is the end of record i.
	text  []byte
	ends  []int
	title []int // end of the title within each record
	price []int
}

// NewCorpus generates records products from seed, deterministically.
func NewCorpus(records int, seed uint64) *Corpus {
	if records <= 0 {
		records = DefaultSearchRecords
	}
	if seed == 0 {
		seed = 1
	}
	c := &Corpus{
		text:  make([]byte, 0, records*170),
		ends:  make([]int, 0, records),
		title: make([]int, 0, records),
		price: make([]int, 0, records),
	}
	r := rng(seed*0x9e3779b97f4a7c15 | 1)
	for range records {
		start := len(c.text)
		c.text = append(c.text, pick(&r, adjectives)...)
		c.text = append(c.text, ' ')
		c.text = append(c.text, pick(&r, materials)...)
		c.text = append(c.text, ' ')
		c.text = append(c.text, pick(&r, nouns)...)
		c.title = append(c.title, len(c.text)-start)
		c.text = append(c.text, " - "...)
		for w := range 18 + int(r.next()%8) {
			if w > 0 {
				c.text = append(c.text, ' ')
			}
			c.text = append(c.text, pick(&r, words)...)
		}
		c.text = append(c.text, '.')
		c.ends = append(c.ends, len(c.text))
		c.price = append(c.price, 199+int(r.next()%50_000))
	}
	return c
}

// Len returns the number of records.
func (c *Corpus) Len() int { return len(c.ends) }

// Size returns the corpus's text size in bytes.
func (c *Corpus) Size() int { return len(c.text) }

// Search scans every record for q, case-insensitively, the way an
// unindexed SQL `WHERE text LIKE '%q%'` does: byte by byte, no index, no
// early exit. It returns the number of matches and the first limit of them.
func (c *Corpus) Search(q string, limit int) (matches int, results []SearchResult) {
	needle := []byte(strings.ToLower(q))
	start := 0
	for i, end := range c.ends {
		rec := c.text[start:end]
		if containsFold(rec, needle) {
			matches++
			if len(results) < limit {
				results = append(results, SearchResult{ID: i + 1, Title: titleCase(rec[:c.title[i]]), PriceCents: c.price[i]})
			}
		}
		start = end
	}
	return matches, results
}

// containsFold reports whether needle (lower case) occurs in hay, folding
// ASCII upper case in hay. It is deliberately the naive O(len(hay) ×
// len(needle)) scan of a database without an index.
func containsFold(hay, needle []byte) bool {
	n := len(needle)
	if n == 0 {
		return true
	}
outer:
	for i := 0; i+n <= len(hay); i++ {
		for j := 0; j < n; j++ {
			c := hay[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != needle[j] {
				continue outer
			}
		}
		return true
	}
	return false
}

func titleCase(b []byte) string {
	s := []byte(string(b))
	up := true
	for i, c := range s {
		if up && 'a' <= c && c <= 'z' {
			s[i] = c - ('a' - 'A')
		}
		up = c == ' '
	}
	return string(s)
}

// NewSearch returns the handler of GET /search?q=TEXT[&limit=N]: an
// unindexed substring scan over an in-memory corpus built once, here, so
// each request costs CPU in proportion to the corpus and nothing else. This
// is the endpoint the flood experiment saturates.
func NewSearch(d Deps, cfg SearchConfig) middleware.HTTPAPIHandler {
	corpus := NewCorpus(cfg.Records, cfg.Seed)
	log := d.logger()
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		q := strings.TrimSpace(req.QueryStringParameters["q"])
		if n := utf8.RuneCountInString(q); !utf8.ValidString(q) || n < MinSearchQuery || n > MaxSearchQuery {
			return badRequest("Send q with 2 to 64 characters of text to search for.")
		}
		limit := DefaultSearchLimit
		if s, ok := req.QueryStringParameters["limit"]; ok {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > MaxSearchLimit {
				return badRequest("limit must be a whole number from 1 to 50.")
			}
			limit = n
		}
		matches, results := corpus.Search(q, limit)
		if results == nil {
			results = []SearchResult{}
		}
		log.DebugContext(ctx, "search: scanned", "records", corpus.Len(), "matches", matches)
		return jsonResponse(200, SearchResponse{Query: q, Scanned: corpus.Len(), Matches: matches, Results: results, Quota: quotas(ctx)})
	}
}

// rng is xorshift64*: fast, deterministic, good enough for sample data.
type rng uint64

func (r *rng) next() uint64 {
	x := uint64(*r)
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	*r = rng(x)
	return x * 0x2545f4914f6cdd1d
}

func pick(r *rng, list []string) string { return list[r.next()%uint64(len(list))] }

var (
	adjectives = []string{"rugged", "compact", "vintage", "ergonomic", "sleek", "handmade", "foldable", "wireless",
		"lightweight", "heavy-duty", "waterproof", "insulated", "modular", "portable", "classic", "smart"}
	materials = []string{"oak", "steel", "bamboo", "leather", "cotton", "granite", "copper", "wool", "glass",
		"ceramic", "walnut", "linen", "aluminium", "cork", "brass", "hemp"}
	nouns = []string{"lamp", "backpack", "kettle", "chair", "notebook", "speaker", "jacket", "desk", "bottle",
		"blanket", "clock", "mug", "shelf", "bicycle", "tent", "headphones", "keyboard", "planter", "wallet", "stool"}
	words = []string{"made", "for", "daily", "use", "with", "a", "finish", "that", "lasts", "years", "and", "easy",
		"care", "designed", "in", "small", "batches", "ships", "flat", "packed", "includes", "spare", "parts",
		"warranty", "of", "two", "quiet", "durable", "soft", "touch", "matte", "colour", "recycled", "packaging",
		"fits", "most", "rooms", "travel", "ready", "tested", "by", "our", "team", "outdoors", "indoors", "gift",
		"idea", "limited", "edition", "natural", "grain", "hand", "stitched", "reinforced", "corners", "adjustable",
		"height", "low", "energy", "long", "battery", "life", "fast", "charging", "water", "resistant"}
)
