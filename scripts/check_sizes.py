#!/usr/bin/env python3
"""Fails when a header is over 600 lines or a function body over 80 lines.

The reading rules of the project: a header small enough to read (one concern), a function
that reads top to bottom on a screen or two. A function may be longer when the comment just
above it says why, on a line that starts with "// Long: ".

Usage: check_sizes.py [ROOT ...]   (default: include tools)

Functions are found on clang-formatted code by brace matching: comments, strings, character
and raw string literals are blanked first, then every `{` outside a function whose head (the
text since the previous `;`, `{` or `}`) is not a class, struct, union, enum, namespace,
extern block or initialiser opens a function, which ends at its matching `}`.
"""
import pathlib
import re
import sys

MAX_HEADER_LINES = 600
MAX_FUNCTION_LINES = 80
SCOPE = re.compile(r'^\s*(template\s*<.*>\s*)?(class|struct|union|enum|namespace)\b|^\s*extern\s', re.S)


def blank(text):
    """Comments and literals replaced by spaces (newlines kept), so braces in them are ignored."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i) and not (i and (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(')' + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c in '"\'':
            if c == "'" and i and text[i - 1].isalnum():  # digit separator 1'000
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def long_functions(path):
    raw = path.read_text(errors='replace')
    lines = raw.split('\n')
    # Preprocessor lines end a head, like a `;`.
    text = re.sub(r'(?m)^[ \t]*#.*$', lambda m: ';' + ' ' * (len(m.group(0)) - 1), blank(raw))
    stack = []  # for each open brace: (kind, start line)
    head_start = 0
    found = []
    line = 1
    for i, c in enumerate(text):
        if c == '\n':
            line += 1
        elif c in ';{}':
            if c == '{':
                in_function = any(kind == 'function' for kind, _ in stack)
                head = text[head_start:i]
                if in_function:
                    stack.append(('block', line))
                elif SCOPE.search(head) or head.rstrip().endswith('='):
                    stack.append(('scope', line))
                else:
                    start = line - text[head_start:i].strip().count('\n')
                    stack.append(('function', start))
            elif c == '}' and stack:
                kind, start = stack.pop()
                if kind == 'function' and not any(k == 'function' for k, _ in stack):
                    length = line - start + 1
                    explained = any(l.strip().startswith('// Long: ')
                                    for l in lines[max(0, start - 8):start - 1])
                    if length > MAX_FUNCTION_LINES and not explained:
                        found.append((start, length, lines[start - 1].strip()[:70]))
            head_start = i + 1
    return found


def main(roots):
    bad = 0
    paths = [q for r in map(pathlib.Path, roots) for q in ([r] if r.is_file() else r.rglob('*'))]
    files = sorted(p for p in paths if p.suffix in ('.hpp', '.cpp', '.h') and p.is_file())
    for path in files:
        count = path.read_text(errors='replace').count('\n')
        if path.suffix in ('.hpp', '.h') and count > MAX_HEADER_LINES:
            print(f'{path}: {count} lines (a header reads as one concern in at most {MAX_HEADER_LINES})')
            bad += 1
        for start, length, text in long_functions(path):
            print(f'{path}:{start}: function of {length} lines (over {MAX_FUNCTION_LINES}, '
                  f'no "// Long: " reason above it): {text}')
            bad += 1
    if not bad:
        print(f'sizes: {len(files)} files, every header within {MAX_HEADER_LINES} lines and '
              f'every function within {MAX_FUNCTION_LINES}')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:] or ['include', 'tools']))
