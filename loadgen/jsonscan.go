package loadgen

// topLevelValue returns the raw JSON value of key in the object data
// (for a string value, with its quotes), looking at the object's own
// members only, or nil when data is not an object holding key. Keys are
// compared as written, escapes included. It reads an answer without
// decoding the rest of it; it is not a validator: a malformed document
// may yield nil or a value.
func topLevelValue(data []byte, key string) []byte {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil
	}
	i++
	for {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != '"' {
			return nil
		}
		end := skipString(data, i)
		if end < 0 {
			return nil
		}
		name := data[i+1 : end-1]
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return nil
		}
		start := skipSpace(data, i+1)
		end = skipValue(data, start)
		if end < 0 {
			return nil
		}
		if string(name) == key {
			return data[start:end]
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ',' {
			return nil
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
