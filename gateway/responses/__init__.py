"""Stored responses of the `/v1/responses` door: what `previous_response_id` continues."""
