package client

// The test server's policy file has a kv policy (a stand-in gate); parsing
// it needs the strategy registered.
import _ "github.com/edgelimit/edgelimit/kvbucket"
