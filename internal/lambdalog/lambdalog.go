// Package lambdalog models Lambda's application log-level filtering, for
// tests: which lines of a function's stdout reach CloudWatch Logs when the
// function's LoggingConfig has LogFormat JSON and an ApplicationLogLevel.
//
// The rules, from the AWS Lambda Developer Guide, "Log-level filtering"
// (monitoring-cloudwatchlogs-log-level): a line of a custom runtime is a
// JSON object with a "level" member; "If the "level" value field is invalid
// or missing, Lambda will assign the log output the level INFO"; "For Lambda
// to use the timestamp field, you must specify the time in valid RFC 3339
// timestamp format. If you don't supply a valid timestamp, Lambda will
// assign the log the level INFO". The page adds that Lambda "supports most
// common naming conventions" for the timestamp key without listing them, so
// the model accepts only "timestamp", the key its example uses: a line that
// passes here does not depend on an unlisted convention.
package lambdalog

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// Levels are Lambda's log levels, lowest first.
var Levels = []string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"}

func rank(level string) int {
	for i, l := range Levels {
		if strings.EqualFold(l, level) {
			return i
		}
	}
	return -1
}

// Assigned is the level Lambda gives line: its "level" member when that is
// one of Levels (any case) and its "timestamp" member is a valid RFC 3339
// time; INFO otherwise (not JSON, no level, an invalid level, no or an
// invalid timestamp).
func Assigned(line []byte) string {
	var doc map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(line), &doc); err != nil {
		return "INFO"
	}
	level, _ := doc["level"].(string)
	ts, _ := doc["timestamp"].(string)
	if rank(level) < 0 {
		return "INFO"
	}
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		return "INFO"
	}
	return strings.ToUpper(level)
}

// Kept reports whether Lambda sends line to CloudWatch Logs when the
// function's ApplicationLogLevel is appLevel (one of Levels; "" is INFO).
func Kept(appLevel string, line []byte) bool {
	if appLevel == "" {
		appLevel = "INFO"
	}
	return rank(Assigned(line)) >= rank(appLevel)
}

// Filter returns the lines of out that Lambda keeps at appLevel.
func Filter(appLevel string, out []byte) [][]byte {
	var kept [][]byte
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if Kept(appLevel, line) {
			kept = append(kept, line)
		}
	}
	return kept
}
