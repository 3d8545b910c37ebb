"""Fixed texts for make_hf_fixtures.py: tokenizer training text, tokenization corpus, prompts."""

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. The dog did not care; it was asleep in the sun.
A policy is a function that maps a context to a distribution over the next token. We train the policy
with reinforcement learning: sample a response, score it, and move the log-probabilities of good
responses up and of bad responses down. The learner keeps a reference model and a value of the reward.
In the morning the town was quiet. People walked to the market, bought bread and apples, and talked
about the weather. It will rain tomorrow, they said, and the river will rise again.
She opened the window and looked at the mountains. The snow on the top was bright and white.
"Where are you going?" he asked. "To the station," she answered, "the train leaves at half past nine."
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 42 100 256 1024 2048 3.14159 2.71828 -1 -0.5 1e-9 1e-5 65536
The year 2024 had 366 days. The price was $19.99, or 18,50 EUR. Call 555-0123 before 10:30.
def add(a, b):
    return a + b

def main():
    for i in range(10):
        if i % 2 == 0:
            print(i, "is even")
        else:
            print(i, "is odd")
    return 0

class Policy:
    def __init__(self, model, temperature=1.0):
        self.model = model
        self.temperature = temperature

    def sample(self, tokens):
        logits = self.model(tokens)
        return logits / self.temperature

function sum(xs) {
\tlet total = 0;
\tfor (const x of xs) {
\t\ttotal += x;
\t}
\treturn total;
}
const result = sum([1, 2, 3]);
console.log(`result = ${result}`);
if (result > 5) { console.log("big"); } else { console.log("small"); }
import numpy as np
x = np.zeros((4, 8), dtype=np.float32)
y = x.mean(axis=-1)
The model reads the prompt and writes the answer. The answer is short and the prompt is long.
Learning rate, batch size, and the number of steps are the three things you change first.
Le café est très bon. Où est la gare? Ça va bien, merci. Déjà vu. Crème brûlée et pâté.
Der Bär läuft über die Straße. Schöne Grüße aus München. Fußball ist größer als Tennis.
El niño comió una manzana. ¿Dónde está la biblioteca? Mañana será otro día.
日本語のテキストです。東京は大きい都市です。こんにちは世界。
中文文本。你好，世界。我们学习机器学习。
Привет, мир! Это русский текст. Москва большая.
مرحبا بالعالم. هذا نص عربي.
Γειά σου κόσμε. Αυτό είναι ελληνικά.
Emoji: 🙂 😀 🚀 👍 ❤️ 🎉 👨‍👩‍👧 🇫🇷 🇯🇵
The end of the story was happy. Everyone went home, ate dinner, and slept well.
Once upon a time there was a small robot who wanted to learn how to read and write.
Every day it read one book, and every night it wrote one page about what it had learned.
The teacher said: practice makes perfect, and the robot practiced every single day.
"""

# Texts for reference.json "tokenization" (each tokenizer encodes all of them).
CORPUS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space and trailing space ",
    "   three leading spaces",
    "multiple    spaces   inside\tand\ttabs",
    "line one\nline two\n\nline four\r\nwindows line\n\n\n",
    "\n\nstarts with newlines",
    "Numbers: 1234567890123456789 and 3.14159 and -42 and 1e-9 and 0.000001 and 65,536",
    "Le café est très bon. Où est la gare? Crème brûlée, naïve, Zoë.",
    "Combining marks: e\u0301 a\u0300 n\u0303 (decomposed) vs é à ñ (precomposed)",
    "日本語のテキスト、東京タワー。中文：你好，世界！한국어 문장입니다.",
    "مرحبا بالعالم، هذا نص عربي. Привет, мир! Γειά σου κόσμε.",
    "Emoji: 🙂😀 🚀 👍🏽 ❤️ family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵🇺🇸 done",
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n",
    "class Foo:\n    def __init__(self):\n        self.x = [i ** 2 for i in range(10)]\n",
    "function f(x) {\n\tif (x > 0) {\n\t\treturn x * 2;\n\t}\n\treturn -x;\n}\n",
    "const s = `value: ${obj?.a ?? 'none'}`; // comment\n/* block */",
    "Special strings inside text: <|im_end|> and <|endoftext|> and <|im_start|>user",
    "Llama specials: <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "SentencePiece specials: <s>[INST] hello [/INST] world</s> and <unk> too",
    "Almost special: <|im_end and <| eot_id |> and <0x41> and < s >",
    "don't won't it's we're they've I'm you'll she'd DON'T IT'S",
    "URL https://example.com/path?a=1&b=2#frag and email test@example.org",
    "Mixed: abc123def 4.5e+10 x_y-z {\"key\": [1, 2, null, true]}",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ and ligature ﬁ and ™ ½ ²",
    "ÀÉÎÕÜ àéîõü ß ø å æ œ ł đ",
]

SPECIAL_TEXTS = [
    "Hello world",
    " leading space",
    "The answer is 42.\n",
]

# (prompt, response) pairs for "cases"; the last is made long in the script.
CASES = [
    ("The quick brown fox", " jumps over the lazy dog."),
    ("def add(a, b):\n", "    return a + b\n"),
    ("Numbers: 1 2 3", " 4 5 6 7 8 9 10"),
    ("Le café est", " très bon. Où est la gare?"),
    ("Q: What is 2 + 2?\nA:", " 4"),
]

LONG_PROMPT = "Once upon a time there was a small robot who wanted to learn how to read and write."
LONG_RESPONSE = (
    " Every day it read one book, and every night it wrote one page about what it had learned."
    " The teacher said: practice makes perfect, and the robot practiced every single day."
    " In the morning the town was quiet."
)

CHATS = [
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
    [
        {"role": "user", "content": "Write a function that adds two numbers."},
        {"role": "assistant", "content": "def add(a, b):\n    return a + b"},
        {"role": "user", "content": "Now in JavaScript, please."},
    ],
]
CHAT_RESPONSES = [
    "The capital of France is Paris.",
    "function add(a, b) {\n\treturn a + b;\n}",
]

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)

# Mistral v0.1 style; a leading system message is prepended to the first user turn.
MISTRAL_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if loop.first and system_message != '' %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}"
    "{%- else %}{{- '[INST] ' + message['content'] + ' [/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token }}"
    "{%- else %}{{- raise_exception('Only user, assistant and a leading system role are supported!') }}"
    "{%- endif %}{%- endfor %}"
)

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
