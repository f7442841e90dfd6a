package handlers

import (
	"context"
	"encoding/json"
	"net/mail"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/middleware"
)

// ContactMessage is what the contact form sends, as JSON or as
// application/x-www-form-urlencoded fields of the same names.
type ContactMessage struct {
	Name    string `json:"name"`
	Email   string `json:"email"`
	Message string `json:"message"`
}

// Limits of a contact message, in characters.
const (
	MaxContactName    = 200
	MaxContactMessage = 5000
)

// ContactResponse is the body of an accepted message.
type ContactResponse struct {
	Status    string  `json:"status"`
	RequestID string  `json:"request_id,omitempty"`
	Quota     []Quota `json:"quota,omitempty"`
}

// NewContact returns the handler of POST /contact: it validates the message
// and accepts it (202). Delivering it (SES, a queue) is left out of the
// example; the handler logs its size, never its content or the sender's
// address.
func NewContact(d Deps) middleware.HTTPAPIHandler {
	log := d.logger()
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		b, ok := body(req)
		if !ok {
			return problem(413, "Content Too Large", "The message must be at most 64 KiB.")
		}
		var m ContactMessage
		switch mediaType(req) {
		case "application/json":
			if err := json.Unmarshal(b, &m); err != nil {
				return badRequest("The body is not a JSON object with name, email and message.")
			}
		case "application/x-www-form-urlencoded":
			v, err := url.ParseQuery(string(b))
			if err != nil {
				return badRequest("The form body does not decode.")
			}
			m = ContactMessage{Name: v.Get("name"), Email: v.Get("email"), Message: v.Get("message")}
		default:
			return problem(415, "Unsupported Media Type", "Send application/json or application/x-www-form-urlencoded.")
		}
		if detail := m.check(); detail != "" {
			return badRequest(detail)
		}
		log.InfoContext(ctx, "contact: message accepted", "chars", utf8.RuneCountInString(m.Message))
		return jsonResponse(202, ContactResponse{Status: "accepted", RequestID: req.RequestContext.RequestID, Quota: quotas(ctx)})
	}
}

// check returns what is wrong with m for the client, or "".
func (m *ContactMessage) check() string {
	m.Name, m.Email = strings.TrimSpace(m.Name), strings.TrimSpace(m.Email)
	switch {
	case !utf8.ValidString(m.Name) || !utf8.ValidString(m.Message):
		return "The name and message must be UTF-8."
	case m.Name == "" || utf8.RuneCountInString(m.Name) > MaxContactName:
		return "The name must be 1 to 200 characters."
	case strings.TrimSpace(m.Message) == "" || utf8.RuneCountInString(m.Message) > MaxContactMessage:
		return "The message must be 1 to 5000 characters."
	}
	a, err := mail.ParseAddress(m.Email)
	if err != nil || a.Address != m.Email || len(m.Email) > 254 {
		return "The email must be a plain address like name@example.com."
	}
	return ""
}
