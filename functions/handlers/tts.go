package handlers

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/middleware"
)

// TTSRequest is the body of POST /tts.
type TTSRequest struct {
	Text string `json:"text"`
}

// MaxTTSText is the longest text /tts speaks, in characters.
const MaxTTSText = 500

// Audio format of /tts: 8 kHz, 8-bit unsigned, mono WAV; each character
// lasts 40 ms.
const (
	ttsRate       = 8000
	ttsPerChar    = ttsRate * 40 / 1000
	wavHeaderSize = 44
)

// NewTTS returns the handler of POST /tts {"text": "..."}: the stand-in for
// an expensive downstream call (a paid text-to-speech API). It answers
// audio/wav, base64-encoded as API Gateway requires for binary bodies: one
// short tone per character, silence for white space. What makes it worth
// protecting is what it would cost per call downstream, and that cost is
// known only once the audio exists: the handler reports the seconds it
// generated (SpeechSeconds) to the middleware, which charges them to the
// speech-seconds policy after the response. The client never says what its
// request costs. Its other policies make abusers pay in proof of work (tts)
// and cap how many syntheses of a client run at once (speech-jobs).
func NewTTS(d Deps) middleware.HTTPAPIHandler {
	log := d.logger()
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		b, ok := body(req)
		if !ok {
			return problem(413, "Content Too Large", "The body must be at most 64 KiB.")
		}
		if mt := mediaType(req); mt != "application/json" {
			return problem(415, "Unsupported Media Type", "Send application/json: {\"text\": \"...\"}.")
		}
		var in TTSRequest
		if err := json.Unmarshal(b, &in); err != nil {
			return badRequest("The body is not a JSON object with a text field.")
		}
		text := strings.TrimSpace(in.Text)
		if n := utf8.RuneCountInString(text); !utf8.ValidString(text) || n == 0 || n > MaxTTSText {
			return badRequest("text must be 1 to 500 characters of UTF-8.")
		}
		wav := Synthesize(text)
		seconds := SpeechSeconds(text)
		if v, ok := edgelimit.FromContext(ctx); ok {
			v.ReportCost(seconds)
		}
		log.InfoContext(ctx, "tts: synthesized", "chars", utf8.RuneCountInString(text), "bytes", len(wav), "seconds", seconds)
		return events.APIGatewayV2HTTPResponse{
			StatusCode:      200,
			Headers:         map[string]string{"Content-Type": "audio/wav", "Cache-Control": "no-store"},
			Body:            base64.StdEncoding.EncodeToString(wav),
			IsBase64Encoded: true,
		}, nil
	}
}

// SpeechSeconds is what Synthesize(text) costs, in whole seconds of audio
// (40 ms per character, rounded up): the units the speech-seconds policy
// counts.
func SpeechSeconds(text string) int64 {
	ms := int64(utf8.RuneCountInString(text)) * 1000 * ttsPerChar / ttsRate
	return (ms + 999) / 1000
}

// Synthesize returns text as a WAV file: 8 kHz, 8-bit unsigned mono, one
// 40 ms tone per character (its pitch from the character), silence for
// white space.
func Synthesize(text string) []byte {
	samples := utf8.RuneCountInString(text) * ttsPerChar
	wav := make([]byte, wavHeaderSize+samples)
	copy(wav[0:], "RIFF")
	binary.LittleEndian.PutUint32(wav[4:], uint32(36+samples))
	copy(wav[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(wav[16:], 16) // fmt chunk size
	binary.LittleEndian.PutUint16(wav[20:], 1)  // PCM
	binary.LittleEndian.PutUint16(wav[22:], 1)  // mono
	binary.LittleEndian.PutUint32(wav[24:], ttsRate)
	binary.LittleEndian.PutUint32(wav[28:], ttsRate) // byte rate
	binary.LittleEndian.PutUint16(wav[32:], 1)       // block align
	binary.LittleEndian.PutUint16(wav[34:], 8)       // bits per sample
	copy(wav[36:], "data")
	binary.LittleEndian.PutUint32(wav[40:], uint32(samples))
	pcm := wav[wavHeaderSize:]
	i := 0
	for _, r := range text {
		tone := pcm[i : i+ttsPerChar]
		i += ttsPerChar
		if r == ' ' || r == '\n' || r == '\t' || r == '\r' {
			for j := range tone {
				tone[j] = 128
			}
			continue
		}
		freq := 220 + float64(r%24)*30
		for j := range tone {
			// A short fade in and out keeps the tones from clicking.
			env := math.Min(1, math.Min(float64(j), float64(ttsPerChar-1-j))/40)
			tone[j] = byte(128 + 100*env*math.Sin(2*math.Pi*freq*float64(j)/ttsRate))
		}
	}
	return wav
}
