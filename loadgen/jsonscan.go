package loadgen

// topLevelValue returns the raw JSON value of key in the object data
// (for a string value, with its quotes), looking at the object's own
// members only, or nil when data is not an object holding key. Keys are
// compared as written, escapes included. It reads an answer without
// decoding the rest of it; it is not a validator: a malformed document
// may yield nil or a value.
func topLevelValue(data []byte, key string) []byte {
	var found []byte
	eachTopLevel(data, func(name, value []byte) bool {
		if string(name) == key {
			found = value
			return false
		}
		return true
	})
	return found
}

// eachTopLevel calls f with the name (as written, without its quotes)
// and the raw value of each member of the object data, in order, until f
// returns false or the object ends. It stops quietly at the first
// malformed member, or at once when data is not an object.
func eachTopLevel(data []byte, f func(name, value []byte) bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return
	}
	i++
	for {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != '"' {
			return
		}
		end := skipString(data, i)
		if end < 0 {
			return
		}
		name := data[i+1 : end-1]
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return
		}
		start := skipSpace(data, i+1)
		end = skipValue(data, start)
		if end < 0 || !f(name, data[start:end]) {
			return
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ',' {
			return
		}
		i++
	}
}

// eachElement calls f with the raw value of each element of the array
// data, in order, until f returns false or the array ends. It stops
// quietly at the first malformed element, or at once when data is not an
// array.
func eachElement(data []byte, f func(elem []byte) bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return
	}
	for {
		start := skipSpace(data, i)
		end := skipValue(data, start)
		if end < 0 || !f(data[start:end]) {
			return
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ',' {
			return
		}
		i++
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at data[i] (a
// quote), or -1 when it does not end.
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index after the value starting at data[i], or -1
// when there is none or it does not end.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				end := skipString(data, i)
				if end < 0 {
					return -1
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	start := i
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if i == start {
				return -1
			}
			return i
		}
		i++
	}
	return -1 // a scalar must be followed by something in an object
}
