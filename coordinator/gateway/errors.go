package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// apiError is an error as OpenAI's API shapes it, with the HTTP status it
// is answered with.
type apiError struct {
	Status     int
	Message    string
	Type       string // invalid_request_error, authentication_error, ...
	Param      string // the request field at fault, if one is
	Code       string
	RetryAfter time.Duration // > 0: sent as Retry-After
}

func (e *apiError) Error() string { return e.Message }

// errorBody is OpenAI's error object.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	b := errorBody{Error: errorObject{Message: e.Message, Type: e.Type}}
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	if e.Code != "" {
		b.Error.Code = &e.Code
	}
	return b
}

func badRequest(param, format string, a ...any) *apiError {
	msg := fmt.Sprintf(format, a...)
	if param != "" {
		msg = param + ": " + msg
	}
	return &apiError{Status: http.StatusBadRequest, Message: msg, Type: "invalid_request_error", Param: param}
}

// retryAfter is what an overloaded or re-forming job asks clients to wait.
const retryAfter = time.Second

// replyError turns a failed reply of rank 0, or a failure to reach it,
// into the answer a client gets.
func replyError(rep *api.GenerateReply, err error, timedOut bool) *apiError {
	if rep != nil && rep.ErrorCode != "" {
		switch rep.ErrorCode {
		case api.CodeInvalid:
			return &apiError{Status: http.StatusBadRequest, Message: rep.Error, Type: "invalid_request_error", Param: rep.ErrorParam}
		case api.CodeOverloaded:
			return &apiError{Status: http.StatusTooManyRequests, Message: rep.Error, Type: "rate_limit_error", Code: "overloaded", RetryAfter: retryAfter}
		case api.CodeUnavailable:
			return &apiError{Status: http.StatusServiceUnavailable, Message: rep.Error, Type: "service_unavailable", Code: "reforming", RetryAfter: retryAfter}
		}
	}
	var tooLarge *broadcast.TooLargeError
	switch {
	case timedOut:
		return &apiError{Status: http.StatusGatewayTimeout, Message: "the request ran past the gateway's request timeout", Type: "timeout", Code: "timeout"}
	case err == nil:
		return nil
	case errors.Is(err, errShuttingDown):
		return &apiError{Status: http.StatusServiceUnavailable, Message: err.Error(), Type: "service_unavailable", Code: "shutting_down", RetryAfter: retryAfter}
	case errors.As(err, &tooLarge):
		// Sending it again can never succeed: no Retry-After.
		return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
			Message: fmt.Sprintf("the request is %d bytes as a NATS message, more than the NATS server's max_payload of %d bytes: shorten the prompt, logit_bias or stop_token_ids",
				tooLarge.Size, tooLarge.Max)}
	case rep == nil || errors.Is(err, client.ErrRequestLost):
		// rank 0 unreachable, gone or restarted: the job may come back.
		return &apiError{Status: http.StatusServiceUnavailable, Message: err.Error(), Type: "service_unavailable", Code: "job_unavailable", RetryAfter: retryAfter}
	}
	return &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"}
}

// refuseUnread answers e to a request whose body was not read: the
// connection closes after the answer, which then goes out at once (net/http
// would otherwise read what is left of the body first, for as long as the
// client takes to send it).
func refuseUnread(w http.ResponseWriter, r *http.Request, e *apiError) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	writeError(w, e)
}

// writeError answers with e as JSON.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	writeJSON(w, e.Status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// unmatchedAsJSON answers the requests mux has no route for with OpenAI's
// error object, as OpenAI's API does, instead of the mux's plain text: an
// unknown path 404, a known path asked with another method 405 (with the
// mux's Allow header). Anything else (a redirect to the canonical path)
// is the mux's.
func unmatchedAsJSON(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusNotFound:
			writeError(w, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), Type: "invalid_request_error"})
		case http.StatusMethodNotAllowed:
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
				Message: fmt.Sprintf("Invalid method for URL (%s %s): allowed are %s", r.Method, r.URL.Path, allow)})
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

// statusRecorder keeps the status and headers of an answer, not its body.
type statusRecorder struct {
	header http.Header
	status int
}

func (s *statusRecorder) Header() http.Header { return s.header }

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return len(b), nil
}
