package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// KeyRequestID is the attribute NewLogHandler adds: the key Lambda's JSON
// log format uses for the request id.
const KeyRequestID = "requestId"

// NewLogHandler returns a slog.Handler that adds the Lambda request id of
// the record's context (lambdacontext.FromContext) as "requestId" and passes
// the record on to h. Records logged without a Lambda context (at init, or
// with context.Background()) pass unchanged. Use the Context variants of
// slog's methods (InfoContext, LogAttrs) with the handler's ctx, as the
// edgelimit engine does. The id is added at the top level unless the logger
// has open groups (WithGroup), in which case it lands in the innermost one.
func NewLogHandler(h slog.Handler) slog.Handler {
	if h == nil {
		panic("metrics: NewLogHandler: nil handler")
	}
	return requestIDHandler{h}
}

type requestIDHandler struct{ h slog.Handler }

func (r requestIDHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r requestIDHandler) Handle(ctx context.Context, rec slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		rec = rec.Clone()
		rec.AddAttrs(slog.String(KeyRequestID, lc.AwsRequestID))
	}
	return r.h.Handle(ctx, rec)
}

func (r requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{r.h.WithAttrs(as)}
}

func (r requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{r.h.WithGroup(name)}
}

// LogConfig configures NewLogger.
type LogConfig struct {
	// Writer receives one JSON object per line; default os.Stderr.
	Writer io.Writer
	// Level is the lowest level written; default slog.LevelInfo.
	Level slog.Leveler
	// Function, if set, is added to every line as "function".
	Function string
}

// NewLogger returns a JSON logger for Lambda: Lambda's JSON log keys
// ("timestamp" in RFC 3339, "level" in upper case, "message"), the request
// id of the record's Lambda context as "requestId", and cfg.Level as the
// filter. Lambda's log-level filtering reads "level", so with the function's
// log format set to JSON these lines are filtered like the runtime's own.
func NewLogger(cfg LogConfig) *slog.Logger {
	w := cfg.Writer
	if w == nil {
		w = os.Stderr
	}
	level := cfg.Level
	if level == nil {
		level = slog.LevelInfo
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				a.Key = "timestamp"
			case slog.MessageKey:
				a.Key = "message"
			}
			return a
		},
	})
	var handler slog.Handler = h
	if cfg.Function != "" {
		handler = handler.WithAttrs([]slog.Attr{slog.String("function", cfg.Function)})
	}
	return slog.New(NewLogHandler(handler))
}

// ParseLevel parses a log level as edgelimit's environment and Lambda's
// AWS_LAMBDA_LOG_LEVEL write it, case-insensitively: TRACE and DEBUG are
// slog.LevelDebug, INFO, WARN (or WARNING), ERROR, and FATAL (as ERROR).
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "TRACE", "DEBUG":
		return slog.LevelDebug, nil
	case "INFO", "":
		return slog.LevelInfo, nil
	case "WARN", "WARNING":
		return slog.LevelWarn, nil
	case "ERROR", "FATAL":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("metrics: log level %q is not one of debug, info, warn, error", s)
}
