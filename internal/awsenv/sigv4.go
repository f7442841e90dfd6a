package awsenv

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// unsigned reports the headers Signature Version 4 leaves out, as the SDK's
// signer does: a proxy or the transport may change them. (A switch, not a
// map: no package init.)
func unsigned(lowerName string) bool {
	switch lowerName {
	case "authorization", "user-agent", "x-amzn-trace-id", "expect", "transfer-encoding":
		return true
	}
	return false
}

// Sign signs req, whose body is payload, for service in region at t with
// Signature Version 4: it sets X-Amz-Date, X-Amz-Security-Token (with a
// session token) and Authorization. Every header req has then is signed,
// except those a proxy may rewrite (User-Agent, Expect, Transfer-Encoding,
// X-Amzn-Trace-Id), with the host and, for a body, its length. The path
// must need no escaping beyond what URL.EscapedPath gives (a service's "/").
func (c Credentials) Sign(req *http.Request, payload []byte, service, region string, t time.Time) {
	t = t.UTC()
	amzDate := t.Format("20060102T150405Z")
	day := amzDate[:8]
	req.Header.Set("X-Amz-Date", amzDate)
	if c.SessionToken != "" {
		req.Header.Set("X-Amz-Security-Token", c.SessionToken)
	}

	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if p := ":443"; req.URL.Scheme == "https" && strings.HasSuffix(host, p) {
		host = strings.TrimSuffix(host, p)
	} else if p := ":80"; req.URL.Scheme == "http" && strings.HasSuffix(host, p) {
		host = strings.TrimSuffix(host, p)
	}
	values := map[string][]string{"host": {host}}
	if len(payload) > 0 {
		values["content-length"] = []string{strconv.Itoa(len(payload))}
	}
	for k, v := range req.Header {
		lk := strings.ToLower(k)
		if unsigned(lk) || lk == "content-length" {
			continue
		}
		values[lk] = append(values[lk], v...)
	}
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	signedHeaders := strings.Join(names, ";")

	var canon strings.Builder
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	canon.WriteString(req.Method + "\n" + path + "\n")
	canon.WriteString(strings.ReplaceAll(req.URL.Query().Encode(), "+", "%20") + "\n")
	for _, k := range names {
		canon.WriteString(k + ":")
		for i, v := range values[k] {
			if i > 0 {
				canon.WriteByte(',')
			}
			canon.WriteString(strings.Join(strings.Fields(v), " "))
		}
		canon.WriteByte('\n')
	}
	canon.WriteString("\n" + signedHeaders + "\n" + hexSHA256(payload))

	scope := day + "/" + region + "/" + service + "/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hexSHA256([]byte(canon.String()))
	key := []byte("AWS4" + c.SecretAccessKey)
	for _, part := range []string{day, region, service, "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+c.AccessKeyID+"/"+scope+
		", SignedHeaders="+signedHeaders+", Signature="+hex.EncodeToString(hmacSHA256(key, toSign)))
}

func hexSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}
