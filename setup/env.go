package setup

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit"
	isecret "github.com/edgelimit/edgelimit/internal/secret"
	"github.com/edgelimit/edgelimit/metrics"
	"github.com/edgelimit/edgelimit/policy"
)

// Environment variables FromEnv reads. template.yaml sets each of them; a
// test keeps the two in step.
const (
	// EnvPolicyFile is the path of a policy file that replaces the function's
	// embedded one (a file in the deployment package or a layer, /opt/...).
	// Default: the embedded file.
	EnvPolicyFile = "EDGELIMIT_POLICY_FILE"
	// EnvOverrides changes policy fields without editing the file: a comma
	// separated list of policy.field=value, field one of limit, window,
	// burst, cost, shadow, on_store_error, store_timeout. Example:
	// "paid-daily.limit=5000,paid-burst.window=1s". The result is validated
	// like the file itself.
	EnvOverrides = "EDGELIMIT_OVERRIDES"
	// EnvShadow puts policies in shadow mode (decide and report, never
	// block): a comma separated list of policy names, or * for all.
	EnvShadow = "EDGELIMIT_SHADOW"
	// EnvTable is the DynamoDB table of the durable and kv strategies.
	// Required when a policy uses one of them.
	EnvTable = "EDGELIMIT_TABLE"
	// EnvKVRegions lists the regions of a kv table replicated over regions
	// (a DynamoDB Global Table), comma separated, this one (AWS_REGION)
	// included, like "eu-west-1,eu-central-1": each region writes only its
	// own part of a bucket and reads the others' (see
	// kvbucket/dynamostore.Config.Regions). Empty (the default): one
	// region, one item per bucket. Read by setup/dynamodb/kv only.
	EnvKVRegions = "EDGELIMIT_KV_REGIONS"
	// EnvEndpoint overrides the DynamoDB endpoint: a local server
	// (http://127.0.0.1:8000) or a FIPS or VPC endpoint. Default: the SDK's.
	EnvEndpoint = "EDGELIMIT_DYNAMODB_ENDPOINT"
	// EnvHashKey is the base64 secret (at least 32 bytes) that keys the hash
	// replacing client keys: the same on every instance. Required.
	EnvHashKey = "EDGELIMIT_HASH_KEY"
	// EnvSecrets is the key ring of the signed strategy: kid:base64 entries,
	// comma separated, newest first (see signedwindow.ParseKeyRing).
	// Required when a policy is signed.
	EnvSecrets = "EDGELIMIT_SECRETS"
	// EnvLogLevel is the lowest level logged: debug, info, warn or error.
	// Default: AWS_LAMBDA_LOG_LEVEL when Lambda sets it, else info.
	EnvLogLevel = "EDGELIMIT_LOG_LEVEL"
	// EnvMetricsNamespace is the CloudWatch namespace of the EMF metrics;
	// default "edgelimit". "off" writes no metrics.
	EnvMetricsNamespace = "EDGELIMIT_METRICS_NAMESPACE"
)

// Variables Lambda sets, which FromEnv reads too.
const (
	envFunctionName   = "AWS_LAMBDA_FUNCTION_NAME"
	envLambdaLogLevel = "AWS_LAMBDA_LOG_LEVEL"
)

// EnvVars lists every variable FromEnv reads that the deployment sets.
var EnvVars = []string{
	EnvPolicyFile, EnvOverrides, EnvShadow, EnvTable, EnvEndpoint, EnvKVRegions, EnvHashKey, EnvSecrets,
	EnvSecretID, EnvTokenSecretID, EnvLogLevel, EnvMetricsNamespace, EnvStoreWarmUp,
}

// EnvConfig is what FromEnv cannot read from the environment.
type EnvConfig struct {
	// Policies is the function's policy file, normally embedded with
	// go:embed. Required unless Tree or EDGELIMIT_POLICY_FILE is set.
	Policies []byte
	// Tree is the function's policy file compiled at build time
	// (policy.Decode's tree), in place of Policies; see FromEnvCompiled.
	Tree *policy.Node
	// PolicyFile names Policies in messages ("policies/paid.yaml").
	PolicyFile string
	// Function names the function in logs and metrics; default
	// AWS_LAMBDA_FUNCTION_NAME.
	Function string
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
	// Stdout receives the EMF metric lines; default os.Stdout.
	Stdout io.Writer
	// Stderr receives the JSON logs; default os.Stderr.
	Stderr io.Writer
	// Now is the clock of the engine, the limiters and the metrics; default
	// time.Now.
	Now func() time.Time
	// Secrets reads the secrets EDGELIMIT_SECRET_ID and
	// EDGELIMIT_TOKEN_SECRET_ID name, at start-up (setup/secretsmanager's
	// Source); without it those variables are an error.
	Secrets SecretSource
	// Backends build the limiters of each strategy the policies use:
	// setup/dynamodb's on Lambda, setup/memory's for one process,
	// setup/signed's for signed policies. Required for every strategy the
	// policy file names.
	Backends []Backend
}

// Env is what a Lambda function builds once, outside its handler.
type Env struct {
	// Engine decides requests; wrap the handler with middleware.HTTPAPI.
	Engine *edgelimit.Engine
	// Logger writes JSON lines with the Lambda request id; pass it to the
	// handler.
	Logger *slog.Logger
	// Metrics is the engine's Observe hook, nil when metrics are off.
	Metrics *metrics.EMF
	// Policies is the policy file in force, overrides applied.
	Policies *policy.File
}

// FromEnvCompiled is FromEnv for a function whose policy file was compiled
// at build time (cfg.Tree, policy.Decode's tree written as Go, like the
// example functions' trees_gen.go): it calls no YAML parser, so a
// bootstrap built with it links none (about 300 KB of an arm64 bootstrap).
// EDGELIMIT_OVERRIDES and EDGELIMIT_SHADOW apply to the tree as FromEnv
// applies them to the YAML, with the same messages; a replacement file
// (EDGELIMIT_POLICY_FILE), and cfg.Policies when cfg.Tree is nil, must be
// written in JSON (policy.DecodeJSON). JSON is YAML, so `edgelimit check`
// and every other reader of policy files read the same file.
func FromEnvCompiled(ctx context.Context, cfg EnvConfig) (*Env, error) {
	return fromEnv(ctx, cfg, policy.DecodeJSON)
}

func fromEnv(ctx context.Context, cfg EnvConfig, decode func(name string, data []byte) (*policy.Node, error)) (*Env, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	stdout, stderr := cfg.Stdout, cfg.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	function := cfg.Function
	if function == "" {
		function = getenv(envFunctionName)
	}
	getenv, err := withSecrets(ctx, getenv, cfg.Secrets)
	if err != nil {
		return nil, err
	}

	levelText, levelFrom := getenv(EnvLogLevel), EnvLogLevel
	if levelText == "" {
		levelText, levelFrom = getenv(envLambdaLogLevel), envLambdaLogLevel
	}
	level, err := metrics.ParseLevel(levelText)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not one of debug, info, warn, error", ErrEnv, levelFrom)
	}
	log := metrics.NewLogger(metrics.LogConfig{Writer: stderr, Level: level, Function: function})

	pf, err := loadPolicies(cfg, getenv, decode)
	if err != nil {
		return nil, err
	}

	secret, err := HashKey(getenv(EnvHashKey))
	if err != nil {
		return nil, err
	}

	warmBudget, err := warmUpBudget(getenv)
	if err != nil {
		return nil, err
	}
	warm := &warmUps{}
	factory, err := Limiters(pf, cfg.Backends, BackendEnv{Getenv: getenv, Logger: log, Now: cfg.Now, warm: warm})
	if err != nil {
		return nil, err
	}

	ovr, err := Overrides(pf, cfg.Backends, BackendEnv{Getenv: getenv, Logger: log, Now: cfg.Now, warm: warm})
	if err != nil {
		return nil, err
	}

	banStore, err := Bans(pf, cfg.Backends, BackendEnv{Getenv: getenv, Logger: log, Now: cfg.Now, warm: warm})
	if err != nil {
		return nil, err
	}

	env := &Env{Logger: log, Policies: pf}
	ecfg := edgelimit.Config{Policies: pf, Limiters: factory, HashSecret: secret, Logger: log, Now: now, Overrides: ovr}
	ecfg.Bans = banStore
	switch ns := strings.TrimSpace(getenv(EnvMetricsNamespace)); ns {
	case "off":
	default:
		m, err := metrics.NewEMF(metrics.EMFConfig{Writer: stdout, Namespace: ns, Function: function, Now: now,
			OnError: func(err error) { log.Warn("edgelimit: metrics", slog.String("error", err.Error())) }})
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrEnv, EnvMetricsNamespace, err)
		}
		env.Metrics = m
		ecfg.Observe = m.Observe
		ecfg.ObserveBreaker = m.ObserveBreaker
	}
	engine, err := edgelimit.New(ecfg)
	if err != nil {
		return nil, err
	}
	env.Engine = engine
	// The stores' connections, open before the first request.
	warm.run(ctx, warmBudget, log)
	var shadow []string
	for _, p := range pf.Policies {
		if p.Shadow {
			shadow = append(shadow, p.Name)
		}
	}
	log.Debug("edgelimit: ready", slog.String("policies", pf.Source), slog.Int("count", len(pf.Policies)),
		slog.Any("shadow", shadow))
	return env, nil
}

// HashKey decodes EDGELIMIT_HASH_KEY: standard base64 (padded or not),
// surrounding white space ignored, at least isecret.MinLength bytes.
// Its errors say what is wrong with the value's shape and never show any
// part of it.
func HashKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: %s is not set; every instance must hash client keys with the same secret: %s",
			ErrEnv, EnvHashKey, hashKeyFormat)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not standard base64: %s; %s", ErrEnv, EnvHashKey, hashKeyProblem(s), hashKeyFormat)
	}
	if len(b) < isecret.MinLength {
		clear(b)
		return nil, fmt.Errorf("%w: %s decodes to %d bytes; it needs at least %d: %s", ErrEnv, EnvHashKey, len(b), isecret.MinLength, hashKeyFormat)
	}
	return b, nil
}

// hashKeyFormat ends every EDGELIMIT_HASH_KEY error: what the value must be.
var hashKeyFormat = fmt.Sprintf("set it to standard base64 of %d or more random bytes, such as the output of `openssl rand -base64 32`",
	isecret.MinLength)

// hashKeyProblem says why s, which is not standard base64, is not, without
// quoting it.
func hashKeyProblem(s string) string {
	const quotes = "\"'`"
	base64ish := func(r rune) bool { // either alphabet, padding, and the line breaks the decoder skips
		return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("+/-_=\r\n", r)
	}
	switch {
	case strings.HasPrefix(s, "{"):
		return "it holds JSON (the whole Secrets Manager secret?); set it to the hash_key value alone, as template.yaml's dynamic reference does"
	case strings.ContainsAny(s[:1], quotes) || strings.ContainsAny(s[len(s)-1:], quotes):
		return "it is in quotes; remove them"
	case strings.ContainsAny(s, " \t\v\f"):
		return "it contains white space"
	case strings.Contains(s, ":"):
		return "it has a colon, like a key ring entry (kid:base64 belongs in " + EnvSecrets + "); the hash key is base64 alone"
	case strings.ContainsFunc(s, func(r rune) bool { return !base64ish(r) }):
		return "it has a character other than A-Z a-z 0-9 + / ="
	case strings.ContainsAny(s, "-_"):
		if _, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "=")); err == nil {
			return "it is URL-safe base64 (- and _); standard base64 uses + and / instead"
		}
		return "it has a character other than A-Z a-z 0-9 + / ="
	}
	return "its length or padding is wrong (cut short?)"
}

// loadPolicies reads the policy file (embedded or EDGELIMIT_POLICY_FILE)
// and applies EDGELIMIT_OVERRIDES and EDGELIMIT_SHADOW.
func loadPolicies(cfg EnvConfig, getenv func(string) string, decode func(string, []byte) (*policy.Node, error)) (*policy.File, error) {
	name, data, tree := cfg.PolicyFile, cfg.Policies, cfg.Tree
	if name == "" {
		name = "policies.yaml (embedded)"
	}
	if path := strings.TrimSpace(getenv(EnvPolicyFile)); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrEnv, EnvPolicyFile, err)
		}
		name, data, tree = path, b, nil
	}
	if tree == nil {
		if len(data) == 0 {
			return nil, fmt.Errorf("%w: no policy file: EnvConfig.Policies is empty and %s is not set", ErrEnv, EnvPolicyFile)
		}
		var err error
		if tree, err = decode(name, data); err != nil {
			return nil, err
		}
	}
	overrides, shadow := strings.TrimSpace(getenv(EnvOverrides)), strings.TrimSpace(getenv(EnvShadow))
	if overrides == "" && shadow == "" {
		return policy.ParseTree(name, tree)
	}
	edited, err := OverrideTree(tree, overrides, shadow)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrEnv, err)
	}
	var what []string
	if overrides != "" {
		what = append(what, EnvOverrides)
	}
	if shadow != "" {
		what = append(what, EnvShadow)
	}
	return policy.ParseTree(name+" with "+strings.Join(what, " and "), edited)
}

// overrideFields are the policy fields EDGELIMIT_OVERRIDES may set, with
// the YAML tag of their values.
var overrideFields = map[string]string{
	"limit":          "!!int",
	"burst":          "!!int",
	"cost":           "!!int",
	"window":         "!!str",
	"store_timeout":  "!!str",
	"on_store_error": "!!str",
	"shadow":         "!!bool",
}

// OverrideTree returns a copy of the policy file's tree doc
// (policy.Decode's) with overrides ("policy.field=value,...", see
// EnvOverrides) and shadow ("name,name" or "*", see EnvShadow) applied, so
// that the result is validated by policy.ParseTree exactly like a
// hand-edited file: a burst on a fixed-window policy or a window without a
// unit is reported the same way, at the line of the value replaced (a field
// the file did not have, at its policy's line). Naming a policy the file
// does not have is an error.
func OverrideTree(doc *policy.Node, overrides, shadow string) (*policy.Node, error) {
	doc = doc.Clone()
	if doc == nil {
		doc = &policy.Node{}
	}
	policies := map[string]*policy.Node{}
	var names []string
	if len(doc.Content) == 1 && doc.Content[0].Kind == policy.MappingNode {
		root := doc.Content[0]
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value != "policies" || root.Content[i+1].Kind != policy.SequenceNode {
				continue
			}
			for _, p := range root.Content[i+1].Content {
				if n := field(p, "name"); n != nil && n.Kind == policy.ScalarNode {
					policies[n.Value] = p
					names = append(names, n.Value)
				}
			}
		}
	}
	lookup := func(env, name string) (*policy.Node, error) {
		p, ok := policies[name]
		if !ok {
			return nil, fmt.Errorf("%s names policy %q, which the policy file does not have (it has %s)", env, name, strings.Join(names, ", "))
		}
		return p, nil
	}
	for _, item := range splitList(overrides) {
		key, value, ok := strings.Cut(item, "=")
		name, fieldName, ok2 := strings.Cut(strings.TrimSpace(key), ".")
		if !ok || !ok2 || name == "" || fieldName == "" {
			return nil, fmt.Errorf("%s: %q is not policy.field=value", EnvOverrides, item)
		}
		tag, known := overrideFields[fieldName]
		if !known {
			fields := make([]string, 0, len(overrideFields))
			for f := range overrideFields {
				fields = append(fields, f)
			}
			slices.Sort(fields)
			return nil, fmt.Errorf("%s: %q: field %q cannot be overridden; use one of %s", EnvOverrides, item, fieldName, strings.Join(fields, ", "))
		}
		value = strings.TrimSpace(value)
		if value == "" {
			return nil, fmt.Errorf("%s: %q has no value", EnvOverrides, item)
		}
		switch tag {
		case "!!int":
			if _, err := strconv.ParseInt(value, 10, 64); err != nil {
				return nil, fmt.Errorf("%s: %q: %s must be a whole number", EnvOverrides, item, fieldName)
			}
		case "!!bool":
			if value != "true" && value != "false" {
				return nil, fmt.Errorf("%s: %q: %s must be true or false", EnvOverrides, item, fieldName)
			}
		}
		p, err := lookup(EnvOverrides, name)
		if err != nil {
			return nil, err
		}
		set(p, fieldName, tag, value)
	}
	if shadow == "*" {
		for _, n := range names {
			set(policies[n], "shadow", "!!bool", "true")
		}
	} else {
		for _, name := range splitList(shadow) {
			p, err := lookup(EnvShadow, name)
			if err != nil {
				return nil, err
			}
			set(p, "shadow", "!!bool", "true")
		}
	}
	return doc, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// field returns the value node of key in mapping m, or nil.
func field(m *policy.Node, key string) *policy.Node {
	if m.Kind != policy.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// set replaces or adds key: value in mapping m: a value replaced keeps its
// line, a field added takes the policy's.
func set(m *policy.Node, key, tag, value string) {
	v := &policy.Node{Kind: policy.ScalarNode, Tag: tag, Value: value, Line: m.Line}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v.Line = m.Content[i+1].Line
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &policy.Node{Kind: policy.ScalarNode, Tag: "!!str", Value: key, Line: m.Line}, v)
}
