"""Schema registry errors, named as Confluent's registry names them. They are BrokerErrors, so
the one map in api/http/errors.py gives them Confluent's statuses and error codes (40401
subject not found, 409 incompatible, 42201 invalid schema, ...)."""

from __future__ import annotations

import json

from api.core.errors import BrokerError


class RegistryError(BrokerError):
    code = "SCHEMA_REGISTRY_ERROR"


class SubjectNotFound(RegistryError):
    code = "SUBJECT_NOT_FOUND"

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' not found.")


class VersionNotFound(RegistryError):
    code = "VERSION_NOT_FOUND"

    def __init__(self, subject: str, version: object) -> None:
        super().__init__(f"Version {version} of subject '{subject}' not found.")


class SchemaNotFound(RegistryError):
    code = "SCHEMA_NOT_FOUND"


class SubjectSoftDeleted(RegistryError):
    code = "SUBJECT_SOFT_DELETED"

    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently."
        )


class SubjectNotSoftDeleted(RegistryError):
    code = "SUBJECT_NOT_SOFT_DELETED"

    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' was not deleted first before being permanently deleted: "
            "delete it without permanent=true first."
        )


class VersionSoftDeleted(RegistryError):
    code = "SCHEMA_VERSION_SOFT_DELETED"

    def __init__(self, subject: str, version: int) -> None:
        super().__init__(
            f"Subject '{subject}' version {version} was soft deleted. Set permanent=true to "
            "delete permanently."
        )


class VersionNotSoftDeleted(RegistryError):
    code = "SCHEMA_VERSION_NOT_SOFT_DELETED"

    def __init__(self, subject: str, version: int) -> None:
        super().__init__(
            f"Subject '{subject}' version {version} was not deleted first before being "
            "permanently deleted: delete it without permanent=true first."
        )


class CompatibilityNotConfigured(RegistryError):
    code = "SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED"

    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' does not have subject-level compatibility configured "
            "(add defaultToGlobal=true for the level that applies)."
        )


class ModeNotConfigured(RegistryError):
    code = "SUBJECT_LEVEL_MODE_NOT_CONFIGURED"

    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' does not have subject-level mode configured "
            "(add defaultToGlobal=true for the mode that applies)."
        )


class IncompatibleSchema(RegistryError):
    code = "INCOMPATIBLE_SCHEMA"

    def __init__(self, subject: str, level: str, messages: list[str]) -> None:
        super().__init__(
            f"Schema being registered is incompatible with an earlier schema for subject "
            f'"{subject}" (compatibility {level}), details: {json.dumps(messages)}'
        )
        self.messages = messages


class InvalidVersion(RegistryError):
    code = "INVALID_VERSION"

    def __init__(self, version: object) -> None:
        super().__init__(
            f"The specified version '{version}' is not a valid version id. Allowed values "
            'are between [1, 2^31-1] and the string "latest".'
        )


class InvalidCompatibilityLevel(RegistryError):
    code = "INVALID_COMPATIBILITY_LEVEL"


class InvalidMode(RegistryError):
    code = "INVALID_MODE"


class OperationNotPermitted(RegistryError):
    code = "OPERATION_NOT_PERMITTED"


class ReferenceExists(RegistryError):
    code = "REFERENCE_EXISTS"


class InvalidSubject(RegistryError):
    code = "INVALID_SUBJECT"


class RecordSchemaInvalid(BrokerError):
    """A key or value refused by the topic's schema validation (Kafka's INVALID_RECORD)."""

    code = "INVALID_RECORD"

    def __init__(self, *, topic: str, index: int, is_key: bool, reason: str) -> None:
        side = "key" if is_key else "value"
        super().__init__(
            f"Record {index}'s {side} was refused: topic {topic!r} validates {side}s against "
            f"the schema registry (confluent.{side}.schema.validation=true), and {reason}."
        )
        self.index = index
        self.topic, self.is_key, self.reason = topic, is_key, reason

    def at(self, index: int) -> RecordSchemaInvalid:
        """The same refusal, of the record at `index` of a larger request."""
        return RecordSchemaInvalid(
            topic=self.topic, index=index, is_key=self.is_key, reason=self.reason
        )
