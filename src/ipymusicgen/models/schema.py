"""Request and response models, straight from the interface document (music-service.md).

Requests are strict: every bound of the spec is checked here, before anything is sent, and a field
that is not part of a shape is refused. Responses are tolerant: unknown fields are kept, optional
fields may be missing, and both the bare and the enveloped shapes parse (observed-behaviour.md).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Annotated, Any, Literal, NamedTuple, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    Strict,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import PydanticCustomError

from ..errors import FieldProblem, IgnoredFieldsWarning, RequestValidationError
from .tasks import TaskState, v1_state, v2_state


class ModelLimits(NamedTuple):
    """What a model version allows: longest song, and most words of lyrics it reads."""

    max_seconds: int
    max_lyrics_words: int


V1_MODELS: Mapping[str, ModelLimits] = MappingProxyType(
    {
        "MFV3.0": ModelLimits(480, 5000),
        "MFV2.0": ModelLimits(480, 5000),
        "MFV1.5X": ModelLimits(480, 5000),
        "MFV1.5": ModelLimits(480, 5000),
        "MFV1.0": ModelLimits(240, 3000),
    }
)
V2_MODELS: Mapping[str, ModelLimits] = MappingProxyType(
    {
        "v4.5-plus": ModelLimits(480, 5000),
        "v4.5": ModelLimits(480, 5000),
        "v4.0": ModelLimits(240, 3000),
        "v3.5": ModelLimits(240, 3000),
        "v3.0": ModelLimits(120, 1000),
    }
)
ACTIONS = ("auto", "custom", "extend", "concat", "upload", "upload_extend", "artist_consistency")
TITLE_MAX = 80
PROMPT_MIN, PROMPT_MAX = 1, 180
UPLOAD_MAX_SECONDS = 480
ALLOW_UNKNOWN_MODELS = "allow_unknown_models"
SINGER_ID_NAMES = ("singer_id", "id")
"""Where a vibe answer's `data` holds the singer id it made (the client reads it; the gateway records its owner)."""
WAV_URL_NAMES = ("wav_url", "url", "audio_url", "file_url")
MP4_URL_NAMES = ("mp4_url", "video_url", "url", "file_url")
"""Key of the pydantic validation context that lets model names outside the known tables through."""


def word_count(text: str | None) -> int:
    """Words as the service counts them for its limits: whitespace-separated."""
    return len(text.split()) if text else 0


def _allow_unknown(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(ALLOW_UNKNOWN_MODELS))


def _check_model_name(name: str | None, known: Mapping[str, ModelLimits], info: ValidationInfo) -> str | None:
    if name is None or name in known or _allow_unknown(info):
        return name
    raise PydanticCustomError(
        "unknown_model",
        "unknown model {name}; known models: {known} (allow unknown models to use a new one)",
        {"name": repr(name), "known": ", ".join(known)},
    )


def _check_lyrics_words(lyrics: str | None, model: str | None, known: Mapping[str, ModelLimits]) -> None:
    if model is not None and model not in known:
        return  # an unknown model the user opted in to: its limit is not known here
    limit = known[model].max_lyrics_words if model else max(m.max_lyrics_words for m in known.values())
    count = word_count(lyrics)
    if count > limit:
        raise PydanticCustomError(
            "lyrics_too_long",
            "lyrics: at most {limit} words for model {model} (got {count})",
            {"limit": limit, "model": model or "(service default)", "count": count},
        )


def _warn_ignored(fields: list[str], why: str) -> None:
    if fields:
        warnings.warn(f"The service will ignore {', '.join(fields)}: {why}.", IgnoredFieldsWarning, stacklevel=4)


def _flag(value: Any) -> Any:
    """A yes/no field of the spec is 0 or 1; True/False (a DataFrame's bool column, numpy's bool_) mean 1/0."""
    if isinstance(value, bool) or type(value).__name__ in ("bool", "bool_"):
        return int(bool(value))
    return value


Flag = Annotated[int, Strict(), Field(ge=0, le=1), BeforeValidator(_flag)]
"""0 or 1 (True/False too); in this order the JSON schema says minimum 0, maximum 1 (agents read it)."""
Instrumental = Flag
Title = Annotated[str, Field(max_length=TITLE_MAX)]
Gender = Literal["male", "female", ""]

# ---------------------------------------------------------------------------------------------------
# The request vocabulary: each field's type and description, once. The studio's hints, the agent server's
# tool parameters and the magics' help are read from these (`field_descriptions`), never retyped.

ACTION = Field(description=f"one of {', '.join(ACTIONS)}")
Mv = Annotated[str | None, Field(description="model version, e.g. MFV2.0")]
InstrumentalField = Annotated[Instrumental | None, Field(description="1 for music without vocals")]
Style = Annotated[str | None, Field(description="genre, mood, instruments (auto: the description)")]
Lyrics = Annotated[str | None, Field(description="lyrics, for custom and extend")]
TitleField = Annotated[Title | None, Field(description="the song's title")]
GenderField = Annotated[Gender | None, Field(description="voice: male or female")]
ContinueAt = Annotated[float | int | None, Field(description="seconds into the song to continue from")]
CONTINUE_SONG_ID = Field(description="song to extend or join")
ContinueSongId = Annotated[str | None, CONTINUE_SONG_ID]
AUDIO_URL = Field(description="an uploaded audio file (upload actions)")
AudioUrl = Annotated[str | None, AUDIO_URL]
SingerId = Annotated[str, Field(description="a singer id (artist_consistency)")]


class _Request(BaseModel):
    # defer_build: each model's validator is built on first use, not at import (%load_ext stays cheap,
    # and shapes a session never uses are never built). Behaviour is unchanged.
    model_config = ConfigDict(extra="forbid", validate_assignment=False, frozen=True, defer_build=True)

    def to_payload(self) -> dict[str, Any]:
        """The JSON body to send: fields left unset are left out."""
        return self.model_dump(mode="json", exclude_none=True)


class _V1Request(_Request):
    @field_validator("mv", mode="after", check_fields=False)
    @classmethod
    def _known_mv(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _check_model_name(value, V1_MODELS, info)

    @field_validator("continue_at", mode="before", check_fields=False)
    @classmethod
    def _no_bool_continue_at(cls, value: Any) -> Any:
        if isinstance(value, bool):  # True would travel as 1.0: a flag where seconds are meant is a mistake
            raise PydanticCustomError("number_type", "must be a number of seconds (got {at})", {"at": value})
        return value

    @field_validator("continue_at", mode="after", check_fields=False)
    @classmethod
    def _finite_continue_at(cls, value: float | int | None) -> float | int | None:
        if isinstance(value, float) and not math.isfinite(value):
            raise PydanticCustomError("finite_number", "must be a finite number of seconds (got {at})", {"at": value})
        return value

    @model_validator(mode="after")
    def _lyrics_rules(self) -> _V1Request:
        lyrics = getattr(self, "lyrics", None)
        _check_lyrics_words(lyrics, getattr(self, "mv", None), V1_MODELS)
        if lyrics and getattr(self, "instrumental", 0) == 1:
            _warn_ignored(["lyrics"], "instrumental=1 makes pure music")
        return self


class AutoRequest(_V1Request):
    """A song from a short description in `style`."""

    action: Annotated[Literal["auto"], ACTION] = "auto"
    mv: Mv = None
    instrumental: InstrumentalField = 0
    style: Style = None
    gender: GenderField = None


class _SongFields(_V1Request):
    """The song fields custom, extend, upload_extend and artist_consistency share, written once. `action` is
    declared here first so it stays the first key of every body (each action narrows it to its own literal)."""

    action: Annotated[str, ACTION]
    mv: Mv = None
    instrumental: InstrumentalField = 0
    style: Style = None
    lyrics: Lyrics = None
    title: TitleField = ""
    gender: GenderField = None


class _ExtendFields(_SongFields):
    """The song fields plus where to continue from: extend and upload_extend."""

    continue_at: ContinueAt = None
    continue_song_id: ContinueSongId = None


class CustomRequest(_SongFields):
    """A song from your lyrics, style and title."""

    action: Annotated[Literal["custom"], ACTION] = "custom"


class ExtendRequest(_ExtendFields):
    """A further segment for `continue_song_id`, starting at `continue_at`."""

    action: Annotated[Literal["extend"], ACTION] = "extend"


class ConcatRequest(_V1Request):
    """Merge the continuation segments of `continue_song_id` into one song."""

    action: Annotated[Literal["concat"], ACTION] = "concat"
    continue_song_id: Annotated[str, CONTINUE_SONG_ID]


class UploadRequest(_V1Request):
    """Turn the audio at `audio_url` into a song that can be operated on."""

    action: Annotated[Literal["upload"], ACTION] = "upload"
    audio_url: Annotated[str, AUDIO_URL]


class UploadExtendRequest(_ExtendFields):
    """Extend an uploaded song, by `audio_url` or by a `continue_song_id` from `upload`."""

    action: Annotated[Literal["upload_extend"], ACTION] = "upload_extend"
    audio_url: AudioUrl = None


class ArtistConsistencyRequest(_SongFields):
    """A song in the vocal tone of `singer_id` (from generate-vibe)."""

    action: Annotated[Literal["artist_consistency"], ACTION] = "artist_consistency"
    singer_id: SingerId


GenerateRequest = Annotated[
    Union[  # noqa: UP007 - a discriminated union reads best spelled out
        AutoRequest,
        CustomRequest,
        ExtendRequest,
        ConcatRequest,
        UploadRequest,
        UploadExtendRequest,
        ArtistConsistencyRequest,
    ],
    Field(discriminator="action"),
]
V1_SHAPES: Mapping[str, type[_V1Request]] = MappingProxyType(
    {
        "auto": AutoRequest,
        "custom": CustomRequest,
        "extend": ExtendRequest,
        "concat": ConcatRequest,
        "upload": UploadRequest,
        "upload_extend": UploadExtendRequest,
        "artist_consistency": ArtistConsistencyRequest,
    }
)


def shape_fields(action: str) -> dict[str, bool]:
    """Fields of an action's shape (without `action`) mapped to whether they are required."""
    model = V1_SHAPES[action]
    return {name: f.is_required() for name, f in model.model_fields.items() if name != "action"}


def field_descriptions(*models: type[BaseModel]) -> dict[str, str]:
    """Each request field of `models` (the first to declare it wins) and its description: what the studio's hints,
    the agent server's tool parameters and the magics' help say about it."""
    described: dict[str, str] = {}
    for model in models:
        for name, info in model.model_fields.items():
            described.setdefault(name, info.description or "")
    return described


V2_AUTO_FIELDS = ("is_auto", "prompt", "model_version")
"""What the v2 endpoint applies with is_auto=1 (description mode): the rest is ignored, so it is not sent."""


class V2Request(_Request):
    """Body of POST {v2_base_url}/v2/submit."""

    is_auto: Annotated[Flag, Field(description="1: from the prompt alone; 0: with your lyrics and title")]
    model_version: Annotated[str, Field(description="v2 model, e.g. v4.5-plus")]
    prompt: Annotated[
        str, Field(min_length=PROMPT_MIN, max_length=PROMPT_MAX, description="what the song should sound like")
    ]
    lyrics: Annotated[str | None, Field(description="lyrics (is_auto=0)")] = ""
    title: Annotated[Title | None, Field(description="the song's title (is_auto=0)")] = ""
    instrumental: InstrumentalField = 0
    continue_at: Annotated[
        Annotated[int, Field(strict=True)] | None, Field(description="seconds into the song to continue from")
    ] = 0
    continue_song_id: Annotated[str | None, Field(description="song to extend")] = ""

    @field_validator("model_version", mode="after")
    @classmethod
    def _known_model(cls, value: str, info: ValidationInfo) -> str:
        return _check_model_name(value, V2_MODELS, info) or value

    @property
    def is_extension(self) -> bool:
        return bool(self.continue_song_id)

    def to_payload(self) -> dict[str, Any]:
        """The JSON body; with is_auto=1 only what the service applies (rule 1): no continue_at, lyrics or title
        that a default or a leftover would otherwise send."""
        payload = super().to_payload()
        if self.is_auto == 1:
            return {k: v for k, v in payload.items() if k in V2_AUTO_FIELDS}
        return payload

    @model_validator(mode="after")
    def _rules(self) -> V2Request:
        _check_lyrics_words(self.lyrics, self.model_version, V2_MODELS)
        if self.is_auto == 1:
            ignored = sorted(self.model_fields_set - set(V2_AUTO_FIELDS))
            _warn_ignored(ignored, "with is_auto=1 only prompt and model_version are applied")
            return self
        if self.is_extension:
            limits = V2_MODELS.get(self.model_version)
            at = self.continue_at or 0
            if at <= 0:
                raise PydanticCustomError(
                    "continue_at_zero",
                    "continue_at: must be more than 0 seconds when extending (got {at})",
                    {"at": at},
                )
            if limits and at > limits.max_seconds:
                raise PydanticCustomError(
                    "continue_at_too_late",
                    "continue_at: at most {max} seconds for model {model} (got {at})",
                    {"max": limits.max_seconds, "model": self.model_version, "at": at},
                )
        if self.lyrics and self.instrumental == 1:
            _warn_ignored(["lyrics"], "instrumental=1 makes pure music")
        return self


class LyricsRequest(_Request):
    """Body of POST /v1/lyrics."""

    prompt: Annotated[str, Field(min_length=1, description="what the lyrics are about")]


_GENERATE_ADAPTER: TypeAdapter[Any] = TypeAdapter(GenerateRequest, config=ConfigDict(defer_build=True))

# ---------------------------------------------------------------------------------------------------
# Turning pydantic errors into one plain line per field.

_PLAIN: Mapping[str, str] = MappingProxyType(
    {
        "string_too_long": "at most {max_length} characters (got {got})",
        "string_too_short": "at least {min_length} character{plural} (got {got})",
        "less_than_equal": "at most {le} (got {input})",
        "greater_than_equal": "at least {ge} (got {input})",
        "int_type": "must be an integer (got {input!r})",
        "int_parsing": "must be an integer (got {input!r})",
        "int_from_float": "must be a whole number (got {input!r})",
        "string_type": "must be text (got {input!r})",
        "float_type": "must be a number (got {input!r})",
        "missing": "required",
    }
)


def _plain_message(error: Mapping[str, Any], action: str | None) -> str:
    kind = error["type"]
    ctx = dict(error.get("ctx") or {})
    value = error.get("input")
    if kind in _PLAIN:
        got = len(value) if isinstance(value, str) else value
        min_length = ctx.get("min_length", 1)
        return _PLAIN[kind].format(**ctx, got=got, input=value, plural="" if min_length == 1 else "s")
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')} (got {value!r})"
    if kind == "extra_forbidden":
        allowed = ", ".join(shape_fields(action)) if action in V1_SHAPES else ""
        where = f"the '{action}' action" if action else "this request"
        return f"not part of {where}" + (f" (it takes: {allowed})" if allowed else "")
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return f"must be one of {', '.join(ACTIONS)}"
    if kind == "model_type":
        return "must be an object of fields"
    message = str(error.get("msg", kind))
    return message.removeprefix("Value error, ")


def explain(exc: PydanticValidationError) -> list[FieldProblem]:
    """Plain-words problems from a pydantic error: `title: at most 80 characters (got 95)`."""
    problems = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        action = None
        if loc and loc[0] in ACTIONS:
            action = loc.pop(0)
        field = ".".join(loc)
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            field = "action"
        message = _plain_message(error, action)
        if field and message.startswith(f"{field}: "):
            message = message[len(field) + 2 :]
        if not field and ": " in message and message.split(": ", 1)[0].isidentifier():
            field, message = message.split(": ", 1)
        problems.append(FieldProblem(field, message))
    return problems


def _validate(adapter_or_model: Any, data: Any, allow_unknown_models: bool) -> Any:
    context = {ALLOW_UNKNOWN_MODELS: allow_unknown_models}
    try:
        if isinstance(adapter_or_model, TypeAdapter):
            return adapter_or_model.validate_python(data, context=context)
        return adapter_or_model.model_validate(data, context=context)
    except PydanticValidationError as exc:
        raise RequestValidationError(explain(exc)) from None


def build_generate_request(
    data: Mapping[str, Any] | BaseModel | None = None, /, *, allow_unknown_models: bool = False, **fields: Any
) -> _V1Request:
    """Validate a v1 body (a dict, keyword arguments or a model) into its shape, or raise plainly.

    `action` defaults to `auto`. Raises `RequestValidationError` naming each bad field.
    """
    if isinstance(data, BaseModel) and not isinstance(data, _V1Request):  # a v2 request would lose its fields
        raise RequestValidationError(
            [FieldProblem("request", f"a v1 request is needed here, not a {type(data).__name__} (v2: submit_v2())")]
        )
    if isinstance(data, _V1Request) and not fields:
        return data  # built (and validated) already: validating again would repeat its warnings
    if isinstance(data, _V1Request):  # keep its action: a default, so not in the "set" fields
        data = {**data.model_dump(exclude_unset=True), "action": data.action}
    body = {**(dict(data) if isinstance(data, Mapping) else {}), **fields}
    body.setdefault("action", "auto")
    return _validate(_GENERATE_ADAPTER, body, allow_unknown_models)


def build_v2_request(
    data: Mapping[str, Any] | V2Request | None = None, /, *, allow_unknown_models: bool = False, **fields: Any
) -> V2Request:
    """Validate a v2 body, or raise `RequestValidationError` naming each bad field."""
    if isinstance(data, BaseModel) and not isinstance(data, V2Request):
        raise RequestValidationError(
            [FieldProblem("request", f"a v2 request is needed here, not a v1 {type(data).__name__} (v1: generate())")]
        )
    if isinstance(data, V2Request) and not fields:
        return data  # built (and validated) already: validating again would repeat its warnings
    if isinstance(data, V2Request):
        data = data.model_dump(exclude_unset=True)
    body = {**(dict(data) if isinstance(data, Mapping) else {}), **fields}
    return _validate(V2Request, body, allow_unknown_models)


def build_lyrics_request(prompt: str) -> LyricsRequest:
    return _validate(LyricsRequest, {"prompt": prompt}, False)


# ---------------------------------------------------------------------------------------------------
# Responses: tolerant.


def _to_str(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _blank_to_none(value: Any) -> Any:
    return None if value == "" else value


Id = Annotated[str, BeforeValidator(_to_str)]
OptionalText = Annotated[str | None, BeforeValidator(_to_str)]
OptionalDate = Annotated[datetime | None, BeforeValidator(_blank_to_none)]


class _Response(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)


class TaskRecord(_Response):
    """One v1 music task. `duration` arrives in milliseconds (-1 until finished)."""

    id: Id
    duration: float | None = None
    status: int | None = None
    title: OptionalText = None
    style: OptionalText = None
    audio_url: OptionalText = None
    cover_url: OptionalText = None
    song_id: OptionalText = None
    lyric: OptionalText = Field(default=None, repr=False)  # a wall of text in a list's repr; `.lyrics` has it
    fail_code: int | None = None
    fail_reason: OptionalText = None

    @property
    def state(self) -> TaskState:
        return v1_state(self.status, self.fail_code, self.fail_reason)

    @property
    def duration_seconds(self) -> float | None:
        """Length in seconds, or None while the song is unfinished."""
        if self.duration is None or not 0 <= self.duration < math.inf:  # -1 while running; NaN/inf are no length
            return None
        return self.duration / 1000

    @property
    def lyrics(self) -> str | None:
        return self.lyric

    @property
    def version(self) -> int:
        return 1

    @property
    def provider(self) -> str:
        """Who made the song: `musicful` (the service), or a synchronous engine's id its record was given."""
        return str((self.__pydantic_extra__ or {}).get("provider") or "musicful")


class V2Song(_Response):
    """One v2 song, as /v2/submit and /v2/query return it. `audio_duration` is in milliseconds (-1 while running)."""

    song_id: Id
    status: OptionalText = None
    audio: OptionalText = None
    audio_duration: float | None = None
    image: OptionalText = None
    lyric: OptionalText = Field(default=None, repr=False)  # a wall of text in a list's repr; `.lyrics` has it
    tags: OptionalText = None
    title: OptionalText = None

    @property
    def id(self) -> str:
        return self.song_id

    @property
    def state(self) -> TaskState:
        return v2_state(self.status, self.audio)

    @property
    def audio_url(self) -> str | None:
        return self.audio

    @property
    def cover_url(self) -> str | None:
        return self.image

    @property
    def style(self) -> str | None:
        return self.tags

    @property
    def lyrics(self) -> str | None:
        return self.lyric

    @property
    def duration_seconds(self) -> float | None:
        """Length in seconds (the service sends milliseconds: 138280 is 2:18.28), None while running."""
        if self.audio_duration is None or not 0 <= self.audio_duration < math.inf:  # NaN/inf are no length
            return None
        return self.audio_duration / 1000

    @property
    def fail_reason(self) -> str | None:
        extra = self.model_extra or {}
        for name in ("fail_reason", "error_message", "error", "message"):
            if extra.get(name):
                return str(extra[name])
        return "failed" if self.state is TaskState.FAILED else None

    @property
    def fail_code(self) -> int | None:
        code = (self.model_extra or {}).get("fail_code")
        return code if isinstance(code, int) else None

    @property
    def version(self) -> int:
        return 2

    @property
    def provider(self) -> str:
        """Who made the song: always the service (v2 is its endpoint)."""
        return "musicful"


class KeyInfo(_Response):
    """Entitlements and metadata of the key in use; the key itself is kept secret."""

    x_api_key: SecretStr | None = Field(default=None, repr=False)
    key_status: int | None = None
    key_music_counts: int | None = None
    email: OptionalText = None
    member_id: OptionalText = None
    key_created_at: OptionalDate = None
    key_updated_at: OptionalDate = None
    key_recently_used_at: OptionalDate = None
    key_name: OptionalText = None


class LyricsResult(_Response):
    """Lyrics made from a prompt: `text` with [Verse]/[Chorus] tags, and a suggested title."""

    text: str
    title: OptionalText = None

    @model_validator(mode="before")
    @classmethod
    def _accept_aliases(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"text": data}
        if isinstance(data, dict) and "text" not in data:
            for name in ("lyrics", "lyric", "content"):
                if isinstance(data.get(name), str):
                    return {**data, "text": data[name]}
        return data

    def __str__(self) -> str:
        return self.text


class GenerateResult(_Response):
    """Task ids created by a v1 generate call (usually two)."""

    ids: list[Id]

    @model_validator(mode="before")
    @classmethod
    def _accept_shapes(cls, data: Any) -> Any:
        if isinstance(data, list):
            return {"ids": data}
        if isinstance(data, str):
            return {"ids": [data]}
        if isinstance(data, dict) and "ids" not in data:
            for name in ("task_ids", "id", "task_id"):
                if name in data:
                    value = data[name]
                    return {**data, "ids": value if isinstance(value, list) else [value]}
        return data


class ValidationErrorDetail(_Response):
    """One entry of a 422 `detail` array."""

    loc: list[str | int] = Field(default_factory=list)
    msg: str = ""
    type: str = ""
    input: Any = None
    ctx: dict[str, Any] | None = None

    def __str__(self) -> str:
        where = ".".join(str(p) for p in self.loc if p != "body")
        return f"{where}: {self.msg}" if where else self.msg


class ValidationErrorBody(_Response):
    detail: list[ValidationErrorDetail] = Field(default_factory=list)


def first_text(data: Any, names: tuple[str, ...]) -> str | None:
    """The first non-empty string among `names` in a dict, or the data itself if it is a string."""
    if isinstance(data, str):
        return data or None
    if isinstance(data, dict):
        for name in names:
            value = data.get(name)
            if isinstance(value, str) and value:
                return value
    return None
