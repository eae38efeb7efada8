package jsonscan

// skipValue validates the value that begins at data[i] (white space skipped), nested in base open
// containers, and returns the index just after it. It is the scanner's inner loop: one state machine
// over the bytes, with the kinds of the open containers in a bit stack, and no recursion.
func skipValue(data []byte, i, base int) (int, error) {
	var (
		stackBuf [4]uint64 // bit d set: the container at relative depth d is an object
		stack    = stackBuf[:]
		depth    int // containers opened by this value
		n        = len(data)
		err      error
	)

value: // data[i] (white space skipped) should begin a value
	if i >= n {
		return 0, errEOF(n)
	}
	switch c := data[i]; c {
	case '"':
		i = skipPlain(data, i+1) // fast path for a string without escapes; the rest goes to scanString
		if i < n && data[i] == '"' {
			i++
		} else if i, _, err = scanString(data, i); err != nil {
			return 0, err
		}
	case '{', '[':
		depth++
		if base+depth > MaxDepth {
			return 0, errDepth(i)
		}
		w := depth >> 6
		if w >= len(stack) { // deeper than 255: rare; grow once to the limit
			stack = append(make([]uint64, 0, MaxDepth/64+1), stack...)[:MaxDepth/64+1]
		}
		i = skipSpace(data, i+1)
		if c == '{' {
			stack[w] |= 1 << (depth & 63)
			if i < n && data[i] == '}' {
				i++
				depth--
				goto next
			}
			goto key
		}
		stack[w] &^= 1 << (depth & 63)
		if i < n && data[i] == ']' {
			i++
			depth--
			goto next
		}
		goto value
	case 't':
		if i, err = scanLiteral(data, i, "true"); err != nil {
			return 0, err
		}
	case 'f':
		if i, err = scanLiteral(data, i, "false"); err != nil {
			return 0, err
		}
	case 'n':
		if i, err = scanLiteral(data, i, "null"); err != nil {
			return 0, err
		}
	default:
		if c == '-' || c-'0' <= 9 {
			if i, err = scanNumber(data, i); err != nil {
				return 0, err
			}
			break
		}
		return 0, errChar(data, i, "looking for beginning of value")
	}

next: // a value ended just before data[i]
	if depth == 0 {
		return i, nil
	}
	i = skipSpace(data, i)
	if i >= n {
		return 0, errEOF(n)
	}
	if stack[depth>>6]&(1<<(depth&63)) != 0 {
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
			goto key
		case '}':
			i++
			depth--
			goto next
		}
		return 0, errChar(data, i, "after object key:value pair")
	}
	switch data[i] {
	case ',':
		i = skipSpace(data, i+1)
		goto value
	case ']':
		i++
		depth--
		goto next
	}
	return 0, errChar(data, i, "after array element")

key: // data[i] (white space skipped) should begin an object key
	if i >= n {
		return 0, errEOF(n)
	}
	if data[i] != '"' {
		return 0, errChar(data, i, "looking for beginning of object key string")
	}
	i = skipPlain(data, i+1)
	if i < n && data[i] == '"' {
		i++
	} else if i, _, err = scanString(data, i); err != nil {
		return 0, err
	}
	i = skipSpace(data, i)
	if i >= n {
		return 0, errEOF(n)
	}
	if data[i] != ':' {
		return 0, errChar(data, i, "after object key")
	}
	i = skipSpace(data, i+1)
	goto value
}
