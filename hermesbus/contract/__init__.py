"""What a message is: the envelope (:mod:`.envelope`), its payloads (:mod:`.payloads`), the
context snapshot it carries (:mod:`.snapshot`), the Kafka headers written beside it
(:mod:`.headers`) and the field types they share (:mod:`.fields`). Pydantic models that
mirror ``schemas/*.avsc``; :mod:`hermesbus.codec` writes and reads them as Avro."""
