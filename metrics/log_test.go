package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/edgelimit/edgelimit/metrics"
)

func decodeLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestNewLoggerAddsRequestIDFromLambdaContext(t *testing.T) {
	var out bytes.Buffer
	log := metrics.NewLogger(metrics.LogConfig{Writer: &out, Function: "paid"})
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "8476a536-e9f4-11e8-9739-2dfe598c3fcd"})
	log.InfoContext(ctx, "edgelimit: store failed", "policy", "paid-daily")
	log.Info("cold start") // no Lambda context: no request id
	log.DebugContext(ctx, "filtered out at the default level")

	lines := decodeLines(t, out.String())
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), out.String())
	}
	first := lines[0]
	for k, want := range map[string]any{
		"requestId": "8476a536-e9f4-11e8-9739-2dfe598c3fcd",
		"level":     "INFO",
		"message":   "edgelimit: store failed",
		"policy":    "paid-daily",
		"function":  "paid",
	} {
		if first[k] != want {
			t.Errorf("line 1: %s = %v, want %v", k, first[k], want)
		}
	}
	if _, ok := first["timestamp"].(string); !ok {
		t.Errorf("line 1 has no timestamp: %v", first)
	}
	if _, ok := lines[1]["requestId"]; ok {
		t.Errorf("line 2 has a requestId without a Lambda context: %v", lines[1])
	}
}

func TestNewLogHandlerKeepsAttrsAndGroups(t *testing.T) {
	var out bytes.Buffer
	h := metrics.NewLogHandler(slog.NewJSONHandler(&out, nil))
	log := slog.New(h).With("service", "search").WithGroup("req")
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "r-1"})
	log.InfoContext(ctx, "hello", "path", "/search")
	lines := decodeLines(t, out.String())
	if lines[0]["service"] != "search" {
		t.Errorf("service = %v, want search", lines[0]["service"])
	}
	req, _ := lines[0]["req"].(map[string]any)
	if req["path"] != "/search" || req[metrics.KeyRequestID] != "r-1" {
		t.Errorf("req group = %v, want path and requestId", req)
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{
		"": slog.LevelInfo, "debug": slog.LevelDebug, "TRACE": slog.LevelDebug, "Info": slog.LevelInfo,
		"warn": slog.LevelWarn, "WARNING": slog.LevelWarn, "error": slog.LevelError, "FATAL": slog.LevelError,
	} {
		got, err := metrics.ParseLevel(in)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	if _, err := metrics.ParseLevel("verbose"); err == nil {
		t.Errorf("ParseLevel(verbose) = nil error, want an error")
	}
}
